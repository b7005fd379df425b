"""ORZ's PPO recipe scaled to Qwen2.5-0.5B on a single GPU (every role colocated on it)."""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen0p5BPPO1GPUConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen0p5b_ppo_1gpu"
    pretrain: str | None = "Qwen/Qwen2.5-0.5B"
    policy_num_nodes: int = 1
    policy_devices_per_node: int = 1
    ref_num_nodes: int = 1
    ref_devices_per_node: int = 1
    critic_num_nodes: int = 1
    critic_devices_per_node: int = 1
    vllm_num_engines: int = 1
    rollout_batch_size: int = 64
    n_samples_per_prompt: int = 8
    generate_max_len: int = 4096
    vllm_gpu_memory_utilization: float = 0.35


if __name__ == "__main__":
    run_recipe(Qwen0p5BPPO1GPUConfig)

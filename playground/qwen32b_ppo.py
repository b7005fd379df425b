"""ORZ's 32B PPO recipe with split placement (no colocate-all): policy+ref on 32 GPUs, critic on 32 GPUs,
16 vLLM engines x tensor-parallel 4 on 64 GPUs (128 GPUs = 16 nodes); critic and policy update concurrently."""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen32BPPOConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen32b_ppo"
    pretrain: str | None = "Qwen/Qwen2.5-32B"
    colocate_all: bool = False
    colocate_policy_ref: bool = True
    policy_num_nodes: int = 4
    ref_num_nodes: int = 4
    critic_num_nodes: int = 4
    vllm_num_engines: int = 16
    vllm_tensor_parallel_size: int = 4
    vllm_gpu_memory_utilization: float = 0.95
    vllm_enable_sleep: bool = False
    ref_offload_params: bool = True


if __name__ == "__main__":
    run_recipe(Qwen32BPPOConfig)

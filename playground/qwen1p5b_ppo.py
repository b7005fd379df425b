"""ORZ's PPO recipe on Qwen2.5-1.5B: 16 GPUs (2 nodes x 8), colocate-all."""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen1p5BPPOConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen1p5b_ppo"
    pretrain: str | None = "Qwen/Qwen2.5-1.5B"
    policy_num_nodes: int = 2
    ref_num_nodes: int = 2
    critic_num_nodes: int = 2
    vllm_num_engines: int = 16


if __name__ == "__main__":
    run_recipe(Qwen1p5BPPOConfig)

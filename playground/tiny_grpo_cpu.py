"""GRPO (no critic) on CPU with the tiny random Qwen2."""

from dataclasses import dataclass

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.exp import run_recipe


@dataclass
class TinyGRPOCPUConfig(TinyPPOCPUConfig):
    exp_name: str = "tiny_grpo_cpu"
    advantage_estimator: str = "grpo"
    whiten_advantages: bool = False
    critic_num_nodes: int = 0


if __name__ == "__main__":
    run_recipe(TinyGRPOCPUConfig)

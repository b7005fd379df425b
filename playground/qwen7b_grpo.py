"""GRPO on Qwen2.5-7B: group-normalised advantages (mean and std of the 64 samples of a prompt), no critic,
k3 KL as a loss term against the reference model."""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BGRPOConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen7b_grpo"
    advantage_estimator: str = "grpo"
    whiten_advantages: bool = False
    critic_num_nodes: int = 0
    kl_mode: str = "loss"
    kl_estimator: str = "k3"
    init_kl_coef: float = 1e-3


if __name__ == "__main__":
    run_recipe(Qwen7BGRPOConfig)

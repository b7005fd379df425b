"""DAPO on Qwen2.5-7B: GRPO advantages with clip-higher (0.2 / 0.28), dynamic sampling (drop prompt groups whose
rewards are all equal, refill), token-mean loss aggregation, soft overlong punishment, no KL."""

from dataclasses import dataclass

from playground.qwen7b_grpo import Qwen7BGRPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BDAPOConfig(Qwen7BGRPOConfig):
    exp_name: str = "qwen7b_dapo"
    kl_mode: str = "none"
    init_kl_coef: float = 0.0
    ref_num_nodes: int = 0
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    agg_mode: str = "token-mean"
    dynamic_sampling: bool = True
    max_sampling_tries: int = 3
    generate_max_len: int = 8192
    overlong_buffer_len: int = 1024
    overlong_penalty_factor: float = 1.0


if __name__ == "__main__":
    run_recipe(Qwen7BDAPOConfig)

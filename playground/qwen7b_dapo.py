"""DAPO's four techniques (Yu et al. 2025, arXiv:2503.14476) on the 7B setup of playground/qwen7b_ppo.py: GRPO
advantages (group mean and std, no critic, no batch whitening), clip-higher (0.2 / 0.28), dynamic sampling (drop
prompt groups whose rewards are all equal, refill), token-mean loss aggregation, soft overlong punishment, no KL.

Not a reproduction of the DAPO paper's run: that run trains Qwen2.5-32B on DAPO-Math-17k with its own batch sizes,
lengths and update schedule, which this recipe does not take over; only the techniques above follow the paper.
"""

from dataclasses import dataclass

from playground.qwen7b_ppo import Qwen7BPPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BDAPOConfig(Qwen7BPPOConfig):
    exp_name: str = "qwen7b_dapo"
    advantage_estimator: str = "grpo"
    grpo_norm_by_std: bool = True
    whiten_advantages: bool = False
    critic_num_nodes: int = 0
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

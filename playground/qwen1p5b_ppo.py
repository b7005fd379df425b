"""Open-Reasoner-Zero's 1.5B PPO run: the 7B recipe (playground/qwen7b_ppo.py) on Qwen2.5-1.5B with 16 GPUs
(2 nodes x 8), colocate-all, and 10048-token packed micro-batches.

Source: Open-Reasoner-Zero/Open-Reasoner-Zero, ``playground/orz_1p5b_ppo.py``, commit 3fdd9a0 (every other training
field equals ``orz_7b_ppo.py``); paper: Hu et al. 2025 (arXiv:2503.24290), Figure 10.

Differs from ORZ: as qwen7b_ppo (see its docstring); ORZ's DEBUG_MODE keeps 128 x 64 samples on 8 GPUs.
"""

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
    max_tokens_per_micro_batch: int = 10048


if __name__ == "__main__":
    run_recipe(Qwen1p5BPPOConfig)

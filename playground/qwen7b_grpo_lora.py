"""The 7B GRPO recipe (playground/qwen7b_grpo.py) training LoRA adapters: rank 32 on every linear layer, on one node
of 8 GPUs instead of four (documented as not run: this project has no GPU).

With adapters the policy keeps gradients and Adam states for ~81 M parameters (1.1% of Qwen2.5-7B) instead of 7.6 B:
the memory model puts the training phase at 35.7 GB per device on 8 GPUs against 50.8 GB for full-weight GRPO on the
same 8 (both fit an 80 GB device; the full recipe's 32 GPUs are for throughput, not memory)
(``python -m playground memory --recipe qwen7b_grpo_lora``). The learning rate is 10x the full recipe's (verl and
TRL report LoRA needing ~10x; verl reports rank 32 converging about like full fine-tuning on 0.5B models). A KL
term would cost no reference model (the adapter switched off), but ORZ's GRPO has none and neither has this recipe.
The sync merges the adapters (``lora_sync=merged``); ``lora_sync=adapter`` sends ~1% of the bytes and lets vLLM
apply the adapter.

Differs from qwen7b_grpo: LoRA (rank 32, alpha 64, all-linear), one node (8 policy ranks, 8 engines), actor_lr 1e-5.
Throughput per step is about a quarter of the 32-GPU recipe's (the same 128 x 64 samples on a quarter of the devices).
"""

from dataclasses import dataclass

from playground.qwen7b_grpo import Qwen7BGRPOConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BGRPOLoRAConfig(Qwen7BGRPOConfig):
    exp_name: str = "qwen7b_grpo_lora"
    policy_num_nodes: int = 1
    ref_num_nodes: int = 1
    critic_num_nodes: int = 0
    vllm_num_engines: int = 8
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_target_modules: list[str] = ("all-linear",)
    actor_lr: float = 1e-5  # 10x qwen7b_grpo's 1e-6


if __name__ == "__main__":
    run_recipe(Qwen7BGRPOLoRAConfig)

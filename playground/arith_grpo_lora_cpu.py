"""GRPO with LoRA adapters on CPU: the ``make demo`` task (2-digit addition from the SFT warm start ``arith-sft``)
training rank-8 adapters on every linear layer instead of every weight (docs/lora.md).

    python -m playground.arith_grpo_lora_cpu                  # 30 steps
    python -m playground.arith_grpo_lora_cpu lora_sync=adapter
    python -m reasonrl.demo --lora                            # the same, with before -> after numbers

The reference for the k3 KL loss is the policy with its adapter switched off (no reference model is loaded), and
the weight sync sends merged weights (``lora_sync=merged``) or the adapter only (``lora_sync=adapter``). The learning
rate is 10x the full fine-tuning recipe's, as peers report for LoRA (verl, TRL).
"""

from dataclasses import dataclass

from playground.arith_grpo_cpu import ArithGRPOCPUConfig
from reasonrl.exp import run_recipe


@dataclass
class ArithGRPOLoRACPUConfig(ArithGRPOCPUConfig):
    exp_name: str = "arith_grpo_lora_cpu"
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_target_modules: list[str] = ("all-linear",)
    actor_lr: float = 1e-3  # 10x ArithGRPOCPUConfig's 1e-4


if __name__ == "__main__":
    run_recipe(ArithGRPOLoRACPUConfig)

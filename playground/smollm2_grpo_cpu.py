"""GRPO on CPU with the real SmolLM2-135M-Instruct on GSM8K (chat template, boxed answers)."""

from dataclasses import dataclass

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.exp import run_recipe


@dataclass
class SmolLM2GRPOCPUConfig(TinyGRPOCPUConfig):
    exp_name: str = "smollm2_grpo_cpu"
    pretrain: str | None = "smollm2"
    max_prompt_len: int = 512
    generate_max_len: int = 256
    actor_lr: float = 1e-6
    n_samples_per_prompt: int = 4
    max_steps: int = 10
    eval_max_prompts: int = 16


if __name__ == "__main__":
    run_recipe(SmolLM2GRPOCPUConfig)

"""SFT recipe: fine-tune the 5M-parameter ``tiny-demo`` Qwen2 on 2-digit addition (the warm start of the demo).

    python -m playground.sft_arith                            # 400 steps, ~2 min on 2 cores -> ckpt/sft_arith_hf
    python -m playground.sft_arith max_steps=1000 overwrite=true
    python -m playground.arith_grpo_cpu pretrain=ckpt/sft_arith_hf   # RL from the result

The same run, cached under ``~/.cache/reasonrl``, is what ``pretrain=arith-sft`` resolves to. Its lr of 1e-3 (set by
``ArithWarmStartConfig``) suits this 5M-parameter model only; ``SFTConfig``'s default (1e-5) is for real LLMs.
"""

from dataclasses import dataclass

from reasonrl.sft import run_sft_recipe
from reasonrl.sft.warm_start import ArithWarmStartConfig


@dataclass
class SFTArithConfig(ArithWarmStartConfig):
    exp_name: str = "sft_arith"
    output_dir: str = "ckpt/sft_arith_hf"
    eval_interval: int = 100


if __name__ == "__main__":
    run_sft_recipe(SFTArithConfig)

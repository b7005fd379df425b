"""GRPO that measurably learns on CPU: 2-digit addition from the SFT warm start ``arith-sft`` (the `make demo` run).

    python -m playground.arith_grpo_cpu                       # 30 steps, ~2 min on 2 cores (+ ~2 min SFT once)
    python -m playground.arith_grpo_cpu max_steps=10 actor_lr=2e-4

The policy starts from ``pretrain=arith-sft`` (a 5M-parameter Qwen2 fine-tuned on ``a+b=`` -> ``c`` until ~60%
held-out accuracy; built on first use and cached, see ``reasonrl.sft.warm_start``). The reward is exact match
of the response with the sum, and only if generation stopped by itself (``reasonrl.data.arithmetic:reward``);
a small k3 KL loss (coefficient 1e-3) to the warm start (the reference model) is logged as ``policy/kl``.
Evaluation is greedy accuracy on 200 held-out problems whose ordered operand pairs never occur in training.
"""

import os
from dataclasses import dataclass

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe


@dataclass
class ArithGRPOCPUConfig(BasePPOExpConfig):
    exp_name: str = "arith_grpo_cpu"
    seed: int = 0
    device: str = "cpu"
    pretrain: str | None = "arith-sft"
    bf16: bool = False
    gradient_checkpointing: bool = False
    zero_stage: int | str = 0
    policy_devices_per_node: int = 1
    ref_devices_per_node: int = 1
    critic_devices_per_node: int = 1
    vllm_num_engines: int = 1
    colocate_all: bool = True
    # every role shares one bundle and they take turns: each uses all the cores (threads follow the bundle's CPUs)
    cpus_per_bundle: float = float(os.cpu_count() or 1)
    train_data: list[str] = ("arith_add2_train",)
    eval_data: list[str] = ("arith_add2_heldout",)
    prompt_template: str = "plain"
    stop: list[str] = ()
    reward_fn: str | None = "reasonrl.data.arithmetic:reward"
    max_prompt_len: int = 32
    generate_max_len: int = 8
    vllm_max_model_len: int | None = 64
    rollout_batch_size: int = 64
    n_samples_per_prompt: int = 8
    advantage_estimator: str = "grpo"
    whiten_advantages: bool = False
    kl_mode: str = "loss"  # a small k3 KL loss to the warm start: keeps the policy near it, and plots the drift
    kl_estimator: str = "k3"
    init_kl_coef: float = 1e-3
    critic_num_nodes: int = 0
    actor_lr: float = 1e-4
    critic_lr: float = 1e-4
    lr_warmup_steps: int = 5
    max_tokens_per_micro_batch: int = 8192
    max_steps: int = 30
    eval_interval: int = 5
    eval_temperature: float = 0.0
    eval_n_samples: int = 1
    save_interval: int = 0
    keep_last_ckpts: int = 1
    dump_generations: int = 4
    verify_workers: int = 1


if __name__ == "__main__":
    run_recipe(ArithGRPOCPUConfig)

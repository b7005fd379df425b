"""PPO with a critic on CPU with the tiny random Qwen2: a pipeline check of the whole loop in about a minute.

    python -m playground.tiny_ppo_cpu
    python -m playground.tiny_grpo_cpu max_steps=10 actor_lr=5e-5

The random model cannot answer GSM8K, so the math reward would be 0 for every sample (no learning signal, which
the trainer warns about). The reward is therefore ``reasonrl.rewards.pipeline_check:digit_fraction`` (the
fraction of digits in the response): samples of a prompt usually differ, so the advantages and gradients are
non-zero (the trainer warns on the steps where they are all 0).
For a run that learns a real task on CPU, see ``arith_grpo_cpu`` (``make demo``).
"""

import os
from dataclasses import dataclass

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe


@dataclass
class TinyPPOCPUConfig(BasePPOExpConfig):
    exp_name: str = "tiny_ppo_cpu"
    device: str = "cpu"
    pretrain: str | None = "tiny"
    bf16: bool = False
    gradient_checkpointing: bool = False
    policy_devices_per_node: int = 1
    ref_devices_per_node: int = 1
    critic_devices_per_node: int = 1
    vllm_num_engines: int = 1
    colocate_all: bool = True
    # every role shares one bundle and they take turns: each uses all the cores (threads follow the bundle's CPUs)
    cpus_per_bundle: float = float(os.cpu_count() or 1)
    train_data: list[str] = ("gsm8k_train",)
    eval_data: list[str] = ("gsm8k_test",)
    prompt_template: str = "chat"
    reward_fn: str | None = "reasonrl.rewards.pipeline_check:digit_fraction"
    stop: list[str] = ()
    max_prompt_len: int = 256
    rollout_batch_size: int = 4
    n_samples_per_prompt: int = 4
    generate_max_len: int = 32
    actor_lr: float = 1e-4
    critic_lr: float = 1e-4
    max_tokens_per_micro_batch: int = 4096
    max_steps: int = 4
    eval_interval: int = 2
    eval_max_prompts: int = 8
    save_interval: int = 2
    verify_workers: int = 1


if __name__ == "__main__":
    run_recipe(TinyPPOCPUConfig)

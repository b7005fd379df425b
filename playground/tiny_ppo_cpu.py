"""PPO with a critic on CPU with the tiny random Qwen2 (tests and pipeline checks; it does not learn math).

python -m playground.tiny_ppo_cpu
"""

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
    train_data: list[str] = ("gsm8k_train",)
    eval_data: list[str] = ("gsm8k_test",)
    prompt_template: str = "chat"
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

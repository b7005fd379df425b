"""ORZ's 7B PPO recipe: Qwen2.5-7B base, GAE (gamma = lambda = 1) with a critic, no KL, colocate-all on 32 GPUs
(4 nodes x 8), 128 prompts x 64 samples per step, 8000-token responses, seq-mean-token-mean loss.

    python -m playground.qwen7b_ppo                      # the full recipe (4 nodes: ray start first, see README)
    DEBUG_MODE=1 python -m playground.qwen7b_ppo         # one GPU, small batches
"""

from dataclasses import dataclass

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BPPOConfig(BasePPOExpConfig):
    exp_name: str = "qwen7b_ppo"
    pretrain: str | None = "Qwen/Qwen2.5-7B"
    policy_num_nodes: int = 4
    ref_num_nodes: int = 4
    critic_num_nodes: int = 4
    vllm_num_engines: int = 32
    colocate_all: bool = True
    train_data: list[str] = ("math_train", "gsm8k_train")
    eval_data: list[str] = ("math500_test",)
    prompt_template: str = "orz"
    rollout_batch_size: int = 128
    n_samples_per_prompt: int = 64
    generate_max_len: int = 8000
    max_prompt_len: int = 2048
    advantage_estimator: str = "gae"
    gamma: float = 1.0
    lam: float = 1.0
    whiten_advantages: bool = True
    policy_loss: str = "ppo"
    agg_mode: str = "seq-mean-token-mean"
    kl_mode: str = "none"
    actor_lr: float = 1e-6
    critic_lr: float = 5e-6
    policy_update_steps: int = 1
    critic_update_steps: int = 12
    eval_interval: int = 10
    save_interval: int = 50


if __name__ == "__main__":
    run_recipe(Qwen7BPPOConfig)

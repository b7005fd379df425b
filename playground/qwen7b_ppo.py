"""Open-Reasoner-Zero's 7B PPO run, field by field: Qwen2.5-7B base, GAE (gamma = lambda = 1) with a critic, no KL,
128 prompts x 64 samples per step, 8000-token responses, in ONE pass over each rollout 1 policy optimizer step and
12 critic optimizer steps, 50-step LR warmup, colocate-all on 32 GPUs (4 nodes x 8).

Source: Open-Reasoner-Zero/Open-Reasoner-Zero, ``playground/orz_7b_ppo.py`` and the defaults it inherits from
``orz/exps/examples/ppo/ppo_base_exp.py``, commit 3fdd9a0; paper: Hu et al. 2025, "Open-Reasoner-Zero"
(arXiv:2503.24290), section 3.1. ``tests/playground/test_playground_orz_fidelity.py`` holds every field against ORZ.

Differs from ORZ:
- vllm_max_model_len: ORZ's ``max_len=8192`` caps prompt + response at 8192 tokens inside vLLM; validation here asks
  the context to hold max_prompt_len + generate_max_len, so it is 10048 (a long prompt can get all 8000 tokens).
- train_data: ORZ trains on ``data/orz_math_57k_collected.json`` (not in its repository snapshot); the built-in
  math_train + gsm8k_train stand in. ORZ's file loads with ``train_data=<file> data_fields=orz``.
- eval_data: ORZ evaluates math500, aime2024 and gpqa_diamond; only math500 is built in.
- eval schedule: ORZ also evaluates before the last batch of each episode; here at step 0, every 10 and at the end.
- update_ref_every_epoch: no effect on training: ORZ's KL coefficients are 0 (its reference model only feeds a
  logged KL); with kl_mode=none no reference model is built.
- mini-batches: ORZ cuts each rank's packed rows into 12 groups of floor(rows / 12) rows and skips the remainder
  (and shuffles the critic's rows); here the rollout is cut into 12 nearly equal sample ranges, every sample used.
- agg_mode: ORZ's losses average the tokens of each packed row (up to 16384 tokens; its packed rows carry no
  action mask) and then the rows; token-mean averages all tokens of the mini-batch, the same for equal rows.
- LR warmup: Hugging Face's constant_with_warmup gives optimizer step k (from 0) the factor k / 50, so ORZ's first
  step has LR 0; here (k + 1) / 50.
- no field (throughput only): vLLM max_num_seqs (ORZ micro_rollout_batch_size=128), enforce_eager (ORZ's offload
  needs it), ORZ's per-step JSON dumps of all generations and replay buffers.
- DEBUG_MODE: ORZ's is 8 GPUs, 16 prompts x 2 samples, 1 critic step; here one device (reasonrl/config/debug.py).

    python -m playground.qwen7b_ppo                      # the full recipe (4 nodes: docs/cpu_and_gpu.md)
    DEBUG_MODE=1 python -m playground.qwen7b_ppo         # one GPU, small batches
"""

from dataclasses import dataclass

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen7BPPOConfig(BasePPOExpConfig):
    exp_name: str = "qwen7b_ppo"
    seed: int = 42
    pretrain: str | None = "Qwen/Qwen2.5-7B"
    # resources: ORZ's 32 "nodes" x 1 GPU are 32 devices; every role and engine shares them
    policy_num_nodes: int = 4
    ref_num_nodes: int = 4
    critic_num_nodes: int = 4
    vllm_num_engines: int = 32
    vllm_tensor_parallel_size: int = 1
    colocate_all: bool = True
    colocate_policy_ref: bool = True
    colocate_critic_reward: bool = True
    zero_stage: int | str = 3
    bf16: bool = True
    gradient_checkpointing: bool = True
    optimizer_offload: bool = False
    vllm_gpu_memory_utilization: float = 0.7
    packing_samples: bool = True
    max_tokens_per_micro_batch: int = 16384
    # data and rollout
    train_data: list[str] = ("math_train", "gsm8k_train")
    eval_data: list[str] = ("math500_test",)
    prompt_template: str = "orz"
    extract_mode: str = "orz"
    max_prompt_len: int = 2048
    rollout_batch_size: int = 128
    n_samples_per_prompt: int = 64
    generate_max_len: int = 8000
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    # algorithm
    advantage_estimator: str = "gae"
    gamma: float = 1.0
    lam: float = 1.0
    whiten_advantages: bool = True
    policy_loss: str = "ppo"
    agg_mode: str = "token-mean"
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    value_clip: float | None = 0.2
    kl_mode: str = "none"
    init_kl_coef: float = 0.0
    # optimisation
    actor_lr: float = 1e-6
    critic_lr: float = 5e-6
    lr_warmup_steps: int = 50
    lr_schedule: str = "constant"
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    policy_epochs: int = 1
    critic_epochs: int = 1
    policy_update_steps: int | None = 1
    critic_update_steps: int | None = 12
    num_episodes: int = 20
    # evaluation and checkpoints
    eval_interval: int = 10
    eval_before_training: bool = True
    eval_n_samples: int = 1
    eval_temperature: float = 1.0
    save_interval: int = 50


if __name__ == "__main__":
    run_recipe(Qwen7BPPOConfig)

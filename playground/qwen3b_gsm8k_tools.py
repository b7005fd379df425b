"""Multi-turn tool RL in the style of verl's multi-turn GSM8K example: Qwen2.5-3B-Instruct solves GSM8K and may call
a Python tool (the sandbox) between its turns; GRPO with a rule reward on the final answer, tool output masked out of
the loss (docs/multi_turn.md).

NOT RUN HERE: this project's machines have no GPU. ``validate()`` and the memory model (docs/memory.md) are the only
checks it has had; expect to tune ``vllm_gpu_memory_utilization`` and ``max_tokens_per_micro_batch`` on real GPUs.

Source: volcengine/verl, ``examples/sglang_multiturn/run_qwen2.5-3b_gsm8k_multiturn.sh`` with
``config/gsm8k_multiturn_grpo.yaml`` (``adv_estimator=grpo``, ``train_batch_size=256``, ``max_prompt_length=1024``,
``max_response_length=1024``, ``actor.optim.lr=1e-6``, ``ppo_mini_batch_size=256``, ``use_kl_loss=True`` with
``kl_loss_coef=0.001`` / ``low_var_kl``, ``entropy_coeff=0``, gradient checkpointing, ``rollout.n=16``,
``multi_turn.max_assistant_turns=5``, Hermes tool-call format, 8 GPUs).

Differs from verl's example:
- the tool: verl's GSM8K example gives the model a ``calc_gsm8k_reward`` tool that checks an answer against the gold
  one (it leaks the reward); here the model gets the ``python`` tool (its program runs in ``reasonrl.sandbox``, stdout
  comes back) and the ``calculator``; the reward reads the final answer only.
- the prompt: the data's question through Qwen's chat template with the tool schemas (``prompt_template=chat``);
  verl's preprocessing adds its own system prompt asking for ``####``.
- one token budget (1024) over all turns, tool output included, where verl counts response tokens per trajectory too.

    python -m playground.qwen3b_gsm8k_tools                     # needs the model in the HF cache and GSM8K
    python -m playground memory --recipe qwen3b_gsm8k_tools     # per-phase device memory (an estimate)
"""

from dataclasses import dataclass

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe


@dataclass
class Qwen3BGSM8KToolsConfig(BasePPOExpConfig):
    exp_name: str = "qwen3b_gsm8k_tools"
    pretrain: str | None = "Qwen/Qwen2.5-3B-Instruct"
    # resources: one node of 8 GPUs, policy, reference and engines colocated
    policy_num_nodes: int = 1
    policy_devices_per_node: int = 8
    ref_num_nodes: int = 1
    ref_devices_per_node: int = 8
    critic_num_nodes: int = 0
    vllm_num_engines: int = 8
    vllm_tensor_parallel_size: int = 1
    colocate_all: bool = True
    zero_stage: int | str = 3
    bf16: bool = True
    gradient_checkpointing: bool = True
    vllm_gpu_memory_utilization: float = 0.5
    packing_samples: bool = True
    max_tokens_per_micro_batch: int = 16384
    # data, prompt and the tools
    train_data: list[str] = ("gsm8k_train",)
    eval_data: list[str] = ("gsm8k_test",)
    prompt_template: str = "chat"
    stop: list[str] = ()
    include_stop_str_in_output: bool = False
    max_prompt_len: int = 1024
    generate_max_len: int = 1024
    env_fn: str | None = "tools"
    tools: list[str] = ("python", "calculator")
    max_turns: int = 5
    max_observation_tokens: int = 256
    # rollout
    rollout_batch_size: int = 256
    n_samples_per_prompt: int = 16
    temperature: float = 1.0
    # algorithm: GRPO with a k3 ("low_var_kl") KL loss, no entropy bonus
    advantage_estimator: str = "grpo"
    grpo_norm_by_std: bool = True
    whiten_advantages: bool = False
    agg_mode: str = "token-mean"
    kl_mode: str = "loss"
    kl_estimator: str = "k3"
    init_kl_coef: float = 0.001
    entropy_coef: float = 0.0
    # optimisation: the whole rollout is one mini-batch
    actor_lr: float = 1e-6
    lr_warmup_steps: int = 0
    lr_schedule: str = "constant"
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    policy_epochs: int = 1
    policy_update_steps: int | None = 1
    num_episodes: int = 15
    # evaluation and checkpoints
    eval_interval: int = 20
    eval_before_training: bool = True
    eval_n_samples: int = 1
    eval_temperature: float = 0.0
    save_interval: int = 20


if __name__ == "__main__":
    run_recipe(Qwen3BGSM8KToolsConfig)

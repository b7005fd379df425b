"""Code RL in the style of Skywork-OR1's 7B runs (He et al. 2025, "Skywork Open Reasoner 1 Technical Report",
arXiv:2505.22312): DeepSeek-R1-Distill-Qwen-7B, GRPO with a binary unit-test reward, 256 prompts x 16 samples per
step in ONE policy update (strictly on-policy), 2048-token prompts and 8192-token responses (their first stage),
lr 1e-6, temperature 1.0, no KL, adaptive entropy control (target 0.2, coefficient in [0, 5e-3], step 1e-4),
groups whose samples all got the same reward dropped (their "rejection sampling"), token-mean loss.

NOT RUN HERE: this project's machines have no GPU. ``validate()`` and the memory model (docs/memory.md) are the only
checks it has had; expect to tune ``vllm_gpu_memory_utilization`` and ``max_tokens_per_micro_batch`` on real GPUs.

Source: SkyworkAI/Skywork-OR1, ``or1_scripts/train/7b_8k.sh`` (verl ``main_ppo``: ``adv_estimator=grpo``,
``train_batch_size=256``, ``ppo_mini_batch_size=256``, ``rollout.n=16``, ``max_prompt_length=2048``,
``max_response_length=8192``, ``optim.lr=1e-6``, ``temperature=1.0``, ``adaptive_entropy`` target 0.2 / max 0.005 /
delta 0.0001, ``rejection_sample=True``, ``n_val=8`` at ``val_temperature=0.6``, ``total_epochs=30``, 8 GPUs a node)
and its code reward ``verl/utils/reward_score/livecodebench/compute_score.py`` (the last fenced ```python block after
``</think>``, stdin/stdout or ``fn_name`` tests, 6 s per test, reward 1 only when every test passes).

Data: Skywork-OR1-RL-Data's code split (14k problems with stdin/stdout or call-style tests), converted once into
this project's code rows (``data_source: code``, ``tests`` in the formats of ``reasonrl.rewards.code``), chat
prompts as Skywork wrote them::

    import json, datasets
    ds = datasets.load_dataset("Skywork/Skywork-OR1-RL-Data", split="code")     # on a machine with network
    rows = [{"id": f"skywork-code-{i}", "question": r["prompt"], "answer": r["reward_model"]["ground_truth"],
             "data_source": "code", "tests": json.loads(r["reward_model"]["ground_truth"])} for i, r in enumerate(ds)]
    # the last 500 rows: data/skywork_or1_code_eval.jsonl, the rest: data/skywork_or1_code_train.jsonl

(``question`` is the chat ``messages`` list; ``answer`` is unused by the code scorer. Check the field names against
the dataset card of the revision you download. The loader's ``verl_code`` preset reads verl-format rows, ``prompt``
and ``reward_model.ground_truth``, as they are: ``data_fields=verl_code`` with the split saved as parquet skips the
conversion.)

Differs from Skywork-OR1:
- data: their 7B run mixes code with math (``train_7b_code.pkl`` twice, ``train_7b_math.pkl``); this recipe trains
  on code only. Their validation sets are AIME24/25 (math) and LiveCodeBench for code; neither is built in here, so
  eval is a held-out slice of the converted file.
- rejection sampling drops zero-advantage groups without sampling more (``dynamic_sampling`` with one try); their
  code also rescales the loss over what is left, which token-mean aggregation does here.
- later stages (16k, then 32k responses) are new runs from a checkpoint with ``generate_max_len`` raised:
  ``resume_allow_changes=generate_max_len,vllm_max_model_len``.
- placement: one node of 8 GPUs, every role colocated (verl's hybrid engine); their ``nnodes`` was a variable.
- sandbox: ``reasonrl.sandbox`` (namespaces, rlimits) instead of their ``subprocess`` runner; programs run on the
  driver's CPUs (``code_workers``), so give the driver node many cores.

    python -m playground.skywork_code_grpo                        # needs the model in the HF cache and the data
    python -m playground memory --recipe skywork_code_grpo        # per-phase device memory (an estimate)
"""

from dataclasses import dataclass

from reasonrl.config import BasePPOExpConfig
from reasonrl.exp import run_recipe


@dataclass
class SkyworkCodeGRPOConfig(BasePPOExpConfig):
    exp_name: str = "skywork_code_grpo"
    seed: int = 42
    pretrain: str | None = "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    # resources: one node of 8 GPUs, policy and engines colocated (no reference model: no KL)
    policy_num_nodes: int = 1
    policy_devices_per_node: int = 8
    ref_num_nodes: int = 0
    critic_num_nodes: int = 0
    vllm_num_engines: int = 8
    vllm_tensor_parallel_size: int = 1
    colocate_all: bool = True
    zero_stage: int | str = 3
    bf16: bool = True
    gradient_checkpointing: bool = True
    vllm_gpu_memory_utilization: float = 0.7
    packing_samples: bool = True
    max_tokens_per_micro_batch: int = 16384
    # data and rollout
    train_data: list[str] = ("data/skywork_or1_code_train.jsonl",)
    eval_data: list[str] = ("data/skywork_or1_code_eval.jsonl",)
    prompt_template: str = "chat"
    max_prompt_len: int = 2048
    generate_max_len: int = 8192
    vllm_max_model_len: int | None = 10240
    rollout_batch_size: int = 256
    n_samples_per_prompt: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    # reward: every unit test must pass
    code_reward: str = "all"
    code_test_timeout_s: float = 6.0
    # algorithm
    advantage_estimator: str = "grpo"
    grpo_norm_by_std: bool = True
    whiten_advantages: bool = False
    agg_mode: str = "token-mean"
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.2
    kl_mode: str = "none"
    init_kl_coef: float = 0.0
    entropy_coef: float = 0.0
    adaptive_entropy: bool = True
    entropy_target: float = 0.2
    entropy_coef_delta: float = 1e-4
    entropy_coef_min: float = 0.0
    entropy_coef_max: float = 5e-3
    dynamic_sampling: bool = True
    max_sampling_tries: int = 1
    # optimisation: the whole rollout is one mini-batch
    actor_lr: float = 1e-6
    lr_warmup_steps: int = 0
    lr_schedule: str = "constant"
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    policy_epochs: int = 1
    policy_update_steps: int | None = 1
    num_episodes: int = 30
    # evaluation and checkpoints
    eval_interval: int = 20
    eval_before_training: bool = True
    eval_n_samples: int = 8
    eval_temperature: float = 0.6
    save_interval: int = 20


if __name__ == "__main__":
    run_recipe(SkyworkCodeGRPOConfig)

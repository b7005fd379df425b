"""Each DeepSpeed role's ZeRO stage from the config's ``zero_stage``: ``"auto"`` (the default) or an explicit 0-3.

An explicit stage applies to every role, as before. ``"auto"`` picks per role (policy, ref, critic, reward):

* **0** when the role has one rank (``<role>_num_nodes x <role>_devices_per_node == 1``) and nothing it uses needs a
  ZeRO stage: one rank partitions nothing, and ZeRO-3's hooks, copies and gradient passes cost ~22% of a one-rank
  CPU update (docs/performance.md);
* **3** otherwise: several ranks (ZeRO-3 partitions parameters, gradients and optimizer states), or one rank that
  needs it:

  - a frozen role (ref, reward) with ``ref_offload_params`` (parameter offload is a ZeRO-3 feature);
  - a trained role (policy, critic) with ``optimizer_offload`` (ZeRO-Offload needs stage >= 1; 3 is the tested path);
  - a trained role with ``bf16`` (ZeRO-0 keeps no fp32 master weights and cannot accumulate gradients in fp32);
  - a trained role under ``colocate_all`` on a device that is not known to be the CPU (``device`` gpu or auto):
    the states a trained role moves off the GPU while vLLM generates (``offload_states``) need a ZeRO optimizer.

Checkpoints: a DeepSpeed checkpoint loads only into an engine of the stage that wrote it, so a resume compares the
stages each role resolves to, not the field's text (:func:`stage_mismatches`, used by
:mod:`reasonrl.config.resume`); with ``zero_stage=auto`` it keeps the stage the checkpoint was written with
(:func:`adopt_saved_zero_stage`). A checkpoint whose ``config.json`` has no ``zero_stage`` was written at
:data:`PRE_AUTO_DEFAULT`, the field's default before ``auto``.

Pure and stdlib only: the run layer (:mod:`reasonrl.run.role_settings`), the memory model's setup
(:mod:`reasonrl.config.memory`) and the resume check read the same rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

AUTO = "auto"
STAGES = (0, 1, 2, 3)
CHOICES = (AUTO, *STAGES)
"""What the ``zero_stage`` field accepts."""
PRE_AUTO_DEFAULT = 3
"""The default of ``zero_stage`` before ``auto`` (checkpoints whose config does not record the field)."""
ROLES = ("policy", "ref", "teacher", "critic", "reward")
TRAINED_ROLES = ("policy", "critic")


def role_world_size(cfg: Any, role: str) -> int:
    """Ranks of ``role``: its ``<role>_num_nodes x <role>_devices_per_node`` (as ``BasePPOExpConfig`` sizes it; the
    distillation teacher has the reference's shape)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")
    fields = "ref" if role == "teacher" else role
    return getattr(cfg, f"{fields}_num_nodes") * getattr(cfg, f"{fields}_devices_per_node")


def auto_needs_zero(cfg: Any, role: str) -> str | None:
    """Why ``zero_stage=auto`` gives ``role`` ZeRO-3 (a short reason), or None when it gives ZeRO-0."""
    world = role_world_size(cfg, role)
    if world != 1:
        return f"{world} ranks"
    if role not in TRAINED_ROLES:
        return "ref_offload_params (parameter offload is ZeRO-3)" if cfg.ref_offload_params else None
    if cfg.optimizer_offload:
        return "optimizer_offload (ZeRO-Offload needs a ZeRO stage)"
    if cfg.bf16:
        return "bf16 training (fp32 master weights and gradient accumulation need a ZeRO stage)"
    if cfg.colocate_all and cfg.device != "cpu":
        return f"colocate_all on device={cfg.device!r} (moving training states off a GPU needs a ZeRO optimizer)"
    return None


def role_zero_stage(cfg: Any, role: str) -> int:
    """The ZeRO stage of ``role`` (``policy``, ``ref``, ``critic``, ``reward``) under ``cfg`` (any object with the
    config's fields): ``cfg.zero_stage`` when explicit, else the ``auto`` rule of this module."""
    role_world_size(cfg, role)  # an unknown role raises, whatever the stage
    stage = cfg.zero_stage
    if stage != AUTO:
        return int(stage)
    return 3 if auto_needs_zero(cfg, role) else 0


def active_roles(cfg: Any) -> tuple[str, ...]:
    """The DeepSpeed roles a run of ``cfg`` places (a LoRA policy is its own reference)."""
    roles = ["policy"]
    if cfg.kl_mode != "none" and not cfg.lora_rank > 0:
        roles.append("ref")
    if getattr(cfg, "teacher_pretrain", None) is not None:  # a checkpoint's config saved before the field: none
        roles.append("teacher")
    if cfg.advantage_estimator == "gae":
        roles.append("critic")
    if cfg.reward_num_nodes > 0:
        roles.append("reward")
    return tuple(roles)


def role_zero_stages(cfg: Any, roles: tuple[str, ...] | None = None) -> dict[str, int]:
    """``{role: stage}`` of ``roles`` (default: the roles a run of ``cfg`` places)."""
    return {role: role_zero_stage(cfg, role) for role in (roles if roles is not None else active_roles(cfg))}


def describe(stages: Mapping[str, int]) -> str:
    """``policy ZeRO-0, ref ZeRO-3``."""
    return ", ".join(f"{role} ZeRO-{stage}" for role, stage in stages.items())


def saved_view(saved: Mapping[str, Any], defaults: Mapping[str, Any]) -> SimpleNamespace:
    """A checkpoint's saved config (its ``config.json`` as a dict) as an object with every field: missing keys take
    ``defaults`` (the field defaults of this run's config class), except ``zero_stage``, which takes
    :data:`PRE_AUTO_DEFAULT` (the stage such a checkpoint was written at)."""
    values = {k: v for k, v in defaults.items() if not k.startswith("_")}
    values["zero_stage"] = PRE_AUTO_DEFAULT
    values.update({k: v for k, v in saved.items() if not k.startswith("_")})
    return SimpleNamespace(**values)


def stage_mismatches(saved: Any, cfg: Any) -> dict[str, tuple[int, int]]:
    """``{role: (checkpoint's stage, this run's stage)}`` for the roles of ``cfg`` whose stage differs from the stage
    the checkpoint (``saved``: :func:`saved_view`) was written with."""
    out = {}
    for role in active_roles(cfg):
        old, new = role_zero_stage(saved, role), role_zero_stage(cfg, role)
        if old != new:
            out[role] = (old, new)
    return out


def stage_problems(cfg: Any) -> list[str]:
    """What the roles' stages cannot run: ``optimizer_offload`` at ZeRO-0 (policy, critic) and ``ref_offload_params``
    below ZeRO-3 (ref, reward). ``auto`` never gives either; an explicit ``zero_stage`` can."""
    if cfg.zero_stage not in CHOICES:
        return []  # reported as an unknown name
    problems = []
    for role, stage in role_zero_stages(cfg).items():
        if role in TRAINED_ROLES and cfg.optimizer_offload and stage == 0:
            problems.append(
                f"optimizer_offload=true needs a ZeRO stage for the {role} (ZeRO-0 keeps the optimizer on the "
                f"device), but zero_stage={cfg.zero_stage!r}: use zero_stage=auto or 1-3"
            )
        if role not in TRAINED_ROLES and cfg.ref_offload_params and stage != 3:
            problems.append(
                f"ref_offload_params=true offloads ZeRO-3 parameter partitions, but the {role} runs at ZeRO-{stage} "
                f"(zero_stage={cfg.zero_stage!r}): use zero_stage=auto or 3"
            )
    return problems


def adopt_saved_zero_stage(cfg: Any, saved: Mapping[str, Any], defaults: Mapping[str, Any]) -> int | None:
    """With ``cfg.zero_stage == "auto"`` and a checkpoint written at other stages than ``auto`` resolves to here,
    set ``cfg.zero_stage`` to the checkpoint's stage (one stage for all its roles: an explicit field, or ``auto``
    that gave every role the same one), so that the resume loads; returns that stage, or None when nothing changed
    (an explicit ``zero_stage`` is never changed: :func:`stage_mismatches` refuses it)."""
    if cfg.zero_stage != AUTO:
        return None
    view = saved_view(saved, defaults)
    if not stage_mismatches(view, cfg):
        return None
    stages = set(role_zero_stages(view, active_roles(cfg)).values())
    if len(stages) != 1:
        return None  # per-role stages that one explicit value cannot express: refused with the mismatch
    (stage,) = stages
    cfg.zero_stage = stage
    if stage_problems(cfg):  # this run cannot use the checkpoint's stage (an offload named in resume_allow_changes)
        cfg.zero_stage = AUTO
        return None
    return stage

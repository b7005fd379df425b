"""Each DeepSpeed role's settings from the experiment config, built where the roles start (:mod:`reasonrl.run.launch`).

The config stays at the bottom (it imports no ``distributed/``); the translation of its fields into the workers' own
dataclass (:class:`reasonrl.distributed.ppo_workers.WorkerConfig`) lives here, one layer above both.
"""

from __future__ import annotations

from typing import Any

from reasonrl.config import BasePPOExpConfig, mapping
from reasonrl.config.zero_stages import role_zero_stage
from reasonrl.distributed.ppo_workers import WorkerConfig


def worker_config(
    cfg: BasePPOExpConfig, role: str, *, num_rollout_steps: int | None = None, **extra: Any
) -> WorkerConfig:
    """``WorkerConfig`` of one role (``policy``, ``ref``, ``teacher``, ``critic``, ``reward``; the teacher is a frozen
    role set up as the reference, from ``teacher_pretrain``).

    ``warmup_steps = lr_warmup_steps`` (optimizer steps of this role) and ``total_steps = num_rollout_steps *
    optimizer steps per rollout`` (``num_rollout_steps`` defaults to ``max_steps``; the linear/cosine schedules need
    one of them). ``zero_stage`` is the role's: ``cfg.zero_stage``, or for ``auto`` 0 on one rank that needs no ZeRO
    feature and 3 otherwise (:func:`reasonrl.config.zero_stages.role_zero_stage`). ``extra`` overrides fields (e.g.
    ``pad_token_id``, known only once the tokenizer is loaded).
    """
    if role not in ("policy", "ref", "teacher", "critic", "reward"):
        raise ValueError(f"unknown role {role!r}; roles are policy, ref, teacher, critic, reward")
    common: dict[str, Any] = dict(
        zero_stage=role_zero_stage(cfg, role),  # "auto" resolved for this role (reasonrl.config.zero_stages)
        bf16=cfg.bf16,
        attn_implementation=cfg.attn_implementation,  # unresolved: each worker resolves "auto" for its placement
        max_tokens_per_micro_batch=cfg.max_tokens_per_micro_batch,
        seed=cfg.seed,
    )
    if role in ("ref", "teacher", "reward"):
        kwargs = dict(common, model_path=mapping.role_model_source(cfg, role), offload_params=cfg.ref_offload_params)
    else:
        per_rollout = (
            cfg.policy_optimizer_steps_per_rollout if role == "policy" else cfg.critic_optimizer_steps_per_rollout
        )
        rollout_steps = num_rollout_steps if num_rollout_steps is not None else cfg.max_steps
        if rollout_steps is None and cfg.lr_schedule != "constant":
            raise ValueError(
                f"lr_schedule={cfg.lr_schedule!r} needs the run length: pass num_rollout_steps or set max_steps"
            )
        kwargs = dict(
            common,
            model_path=mapping.role_model_source(cfg, role),
            lr=cfg.actor_lr if role == "policy" else cfg.critic_lr,
            weight_decay=cfg.weight_decay,
            warmup_steps=cfg.lr_warmup_steps,  # optimizer steps of this role, as ORZ / OpenRLHF / verl
            lr_schedule=cfg.lr_schedule,
            grad_clip=cfg.grad_clip,
            gradient_checkpointing=cfg.gradient_checkpointing,
            offload_optimizer=cfg.optimizer_offload,
        )
        if rollout_steps is not None:
            kwargs["total_steps"] = max(rollout_steps * per_rollout, 1)
        if role == "policy" and cfg.freeze_vision_tower:
            kwargs["freeze_vision_tower"] = True
        if role == "policy" and cfg.use_lora:
            kwargs |= dict(
                lora_rank=cfg.lora_rank,
                lora_alpha=cfg.lora_alpha,
                lora_dropout=cfg.lora_dropout,
                lora_target_modules=list(cfg.lora_target_modules),
            )
    # Ulysses on the roles validate() checks (policy, reference, critic); the teacher and the reward model run whole
    # sequences (their models' heads are not checked)
    kwargs["sequence_parallel_size"] = cfg.sequence_parallel_size if role in ("policy", "ref", "critic") else 1
    if role == "policy" and cfg.reference_fused:  # reference_process: each policy rank also holds the reference
        kwargs["reference"] = worker_config(cfg, "ref", num_rollout_steps=num_rollout_steps, **extra)
    kwargs.update(extra)
    # packed only where it saves compute (flash-attention), decided by each worker for the backend it resolved
    kwargs.setdefault("packing", "auto" if cfg.packing_samples else "off")
    return WorkerConfig(**kwargs)

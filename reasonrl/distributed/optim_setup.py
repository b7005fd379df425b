"""What the optimizer and its LR schedule are made of, before any engine exists (no ``deepspeed`` import).

:func:`optimizer_param_groups` splits the parameters into decayed and undecayed groups, :func:`optimizer_impl`
resolves which AdamW implementation :func:`reasonrl.distributed.deepspeed_engine.make_optimizer` builds, and
:func:`make_lr_scheduler` gives the client ``LambdaLR`` (warmup, then constant / linear / cosine, :func:`lr_factor`)
that the DeepSpeed engine steps after every applied optimizer step and saves with the checkpoint.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from reasonrl.distributed.ds_config import require_field
from reasonrl.distributed.platform import device_type

SCHEDULES = ("constant", "linear", "cosine")
OPTIMIZER_IMPLS = ("auto", "torch", "fused", "cpu_adam")
# What "auto" gives on a GPU where DeepSpeed's FusedAdam can neither load pre-built nor JIT-build: torch's own fused
# AdamW kernel (``torch.optim.AdamW(fused=True)``, shipped with torch, no nvcc needed). Same AdamW update.
TORCH_FUSED = "torch_fused"


def optimizer_param_groups(model, weight_decay: float) -> list[dict[str, Any]]:
    """Trainable parameters split into a decayed group and a ``weight_decay=0`` group (empty groups dropped).

    No decay on biases and on every parameter whose FULL shape is 1-D (RMSNorm / LayerNorm weights, value-head
    bias): the usual AdamW recipe. Under ZeRO-3 the local tensor is a flat ``(n,)`` shard, so the full shape is
    read from DeepSpeed's ``ds_shape``. Embeddings and the LM head are matrices and are decayed.
    """
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        shape = tuple(getattr(param, "ds_shape", param.shape))
        (no_decay if len(shape) < 2 or name.endswith("bias") else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]  # DeepSpeed drops empty groups; the scheduler must see the same list


def optimizer_impl(ds_config: dict[str, Any] | None = None, impl: str = "auto") -> str:
    """Resolve ``impl`` for :func:`~reasonrl.distributed.deepspeed_engine.make_optimizer`: ``"auto"`` gives
    ``"cpu_adam"`` when ``ds_config`` offloads the optimizer, else ``"fused"`` on a GPU placement, else ``"torch"``;
    other values are checked and returned."""
    require_field(impl in OPTIMIZER_IMPLS, "impl", f"must be one of {OPTIMIZER_IMPLS}, got {impl!r}")
    if impl != "auto":
        return impl
    offload = ((ds_config or {}).get("zero_optimization", {}).get("offload_optimizer") or {}).get("device")
    return "cpu_adam" if offload in ("cpu", "nvme") else "fused" if device_type() == "cuda" else "torch"


def fused_or_fallback(fused_adam_problem: str | None) -> tuple[str, str | None]:
    """Where ``"auto"`` resolved to ``"fused"``: keep DeepSpeed's ``FusedAdam`` when it can load
    (``fused_adam_problem`` is None: pre-built with ``DS_BUILD_FUSED_ADAM=1``, or an ``nvcc`` matching torch's CUDA
    to JIT-build it), else fall back to :data:`TORCH_FUSED`. Returns ``(impl, warning)``: the one warning to log
    for the fallback, or None.

    The fallback's cost, named in the warning: under ZeRO-3 ``offload_states`` moves optimizer states and fp32 master
    weights only for ``FusedAdam``, so with torch's AdamW they stay on the device between phases."""
    if fused_adam_problem is None:
        return "fused", None
    return TORCH_FUSED, (
        f"DeepSpeed's FusedAdam cannot be built here ({fused_adam_problem.strip()}); using torch.optim.AdamW"
        "(fused=True) instead (same AdamW update). Under ZeRO-3 its optimizer states and fp32 master weights stay "
        "on the GPU between phases (offload_states moves them only for FusedAdam). To get FusedAdam: install the "
        "CUDA toolkit whose version matches torch.version.cuda (nvcc on PATH, CUDA_HOME set), or pre-build it with "
        "DS_BUILD_FUSED_ADAM=1 pip install deepspeed (the Dockerfile does)."
    )


def lr_factor(
    step: int,
    *,
    warmup_steps: int,
    total_steps: int | None = None,
    schedule: str = "constant",
    min_lr_ratio: float = 0.0,
) -> float:
    """LR multiplier for the optimizer step with 0-based index ``step``.

    Warmup: ``(step + 1) / warmup_steps`` for ``step < warmup_steps`` (the first step already learns; the last
    warmup step is at full LR). Then ``constant``: 1; ``linear`` / ``cosine``: from 1 down to ``min_lr_ratio`` with
    ``progress = (step - warmup_steps) / (total_steps - warmup_steps)`` (reached at ``step == total_steps``,
    held after it).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    decay = 1.0 - progress if schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_lr_ratio + (1.0 - min_lr_ratio) * decay


def make_lr_scheduler(
    optimizer,
    warmup_steps: int = 0,
    total_steps: int | None = None,
    schedule: str = "constant",
    min_lr_ratio: float = 0.0,
):
    """A ``torch.optim.lr_scheduler.LambdaLR`` following :func:`lr_factor`. Pass it to
    :func:`~reasonrl.distributed.deepspeed_engine.initialize`: the engine steps it once per applied optimizer step and
    saves/loads it with the checkpoint. Step counts are optimizer steps (not micro-batches). ``total_steps`` is
    required for ``linear`` and ``cosine``."""
    from torch.optim.lr_scheduler import LambdaLR

    require_field(schedule in SCHEDULES, "schedule", f"must be one of {SCHEDULES}, got {schedule!r}")
    require_field(
        isinstance(warmup_steps, int) and warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {warmup_steps!r}"
    )
    require_field(0.0 <= min_lr_ratio <= 1.0, "min_lr_ratio", f"must be in [0, 1], got {min_lr_ratio!r}")
    if schedule != "constant":
        require_field(
            isinstance(total_steps, int) and total_steps > warmup_steps,
            "total_steps",
            f"must be an integer > warmup_steps={warmup_steps} for schedule={schedule!r}, got {total_steps!r}",
        )
    kwargs = dict(warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule, min_lr_ratio=min_lr_ratio)
    return LambdaLR(optimizer, functools.partial(lr_factor, **kwargs))

"""The DeepSpeed adapter: the only module in reasonrl that calls DeepSpeed.

It builds DeepSpeed configs, joins the torch.distributed group (``nccl`` on GPU, ``gloo`` on CPU), loads Hugging
Face models partitioned under ZeRO-3, builds the optimizer and LR schedule, wraps models in training or frozen
engines, offloads/reloads engine states between phases, saves/loads full training state and gathers full
parameters back. A DeepSpeed upgrade should only need to touch this file. Facts it relies on (DeepSpeed 0.19.8,
transformers 5.19, torch 2.13; measured on CPU unless marked otherwise):

* ZeRO-3 loading must go through transformers' ``HfDeepSpeedConfig`` (kept alive while ``from_pretrained`` runs):
  transformers then builds the model under ``deepspeed.zero.Init`` and loads the checkpoint shard-wise. A raw
  ``zero.Init`` around ``from_pretrained`` crashes in ``_init_weights``.
* While an ``HfDeepSpeedConfig`` is alive, any other ``from_pretrained`` in the process is partitioned too; use
  :func:`load_plain_model` or :func:`no_zero3_init` for an unpartitioned model.
* Optimizers are client optimizers (:func:`make_optimizer`), never a config ``"optimizer"`` section, so weight
  decay can be split by parameter group. On CPU a ``torch.optim.AdamW`` avoids DeepSpeed's JIT-compiled
  FusedAdam / CPUAdam (80 s / 40 s g++ builds, cached in ``~/.cache/torch_extensions``). ZeRO-Offload
  (``offload_optimizer``) REQUIRES ``DeepSpeedCPUAdam`` (DeepSpeed raises for any other client optimizer unless
  ``zero_force_ds_cpu_optimizer`` is false), so enabling it costs that 40 s build once per machine.
* ``engine.offload_states()`` (ZeRO-3) refuses to move optimizer states / fp32 master weights unless the optimizer
  is exactly DeepSpeed's ``FusedAdam`` (assert in ``stage3.offload_states``); it also refuses engines with
  parameter offload or without an optimizer. See :func:`offload_states` for what we do about each case.
* The LR scheduler is a client ``LambdaLR`` handed to ``deepspeed.initialize``: the engine steps it after every
  applied optimizer step and stores its ``state_dict`` in the checkpoint's model-states file.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.distributed.platform import apply_cpu_threads, apply_runtime_env, device_type, dist_backend

SCHEDULES = ("constant", "linear", "cosine")
OPTIMIZER_IMPLS = ("auto", "torch", "fused", "cpu_adam")
CLIENT_STATE_KEY = "reasonrl_client_state"  # our client_state lives under this one key of the DeepSpeed checkpoint
DEFAULT_BUCKET_BYTES = 256 * 1024**2


def _require(ok: bool, field: str, message: str) -> None:
    if not ok:
        raise ValueError(f"{field}: {message}")


def build_ds_config(
    *,
    zero_stage: int = 3,
    bf16: bool = False,
    micro_batch_size_per_rank: int = 1,
    grad_accum_steps: int = 1,
    world_size: int = 1,
    grad_clip: float = 1.0,
    offload_optimizer: bool = False,
    offload_params: bool = False,
    train: bool = True,
    grad_accum_dtype: str | None = "auto",
    memory_efficient_linear: bool | None = None,
) -> dict[str, Any]:
    """A DeepSpeed config dict. Invalid values raise ``ValueError`` naming the field.

    Args:
        zero_stage: 0-3. Stage 3 partitions parameters (load them with :func:`load_causal_lm`).
        bf16: bf16 mixed precision (fp32 master weights in the ZeRO optimizer); otherwise pure fp32.
        micro_batch_size_per_rank, grad_accum_steps, world_size: give ``train_batch_size`` (DeepSpeed checks the
            product). With ``grad_accum_steps > 1`` the engine only steps optimizer and scheduler every that many
            ``engine.step()`` calls.
        grad_clip: global gradient-norm clip (``gradient_clipping``); 0 disables it. Training configs only.
        offload_optimizer: ZeRO-Offload: optimizer states and fp32 master weights in CPU memory, stepped by
            ``DeepSpeedCPUAdam`` (one ~40 s JIT build; :func:`make_optimizer` picks it). Needs ``zero_stage >= 1``;
            ignored for ``train=False`` (a frozen model has no optimizer).
        offload_params: keep ZeRO-3 parameter partitions in CPU memory, fetched layer by layer in forward. Meant
            for frozen reference / reward models sharing a GPU. Needs ``zero_stage == 3``.
        train: ``False`` gives an inference-only config for frozen models (no clipping, no optimizer settings);
            wrap those with :func:`initialize_frozen`.
        grad_accum_dtype: ``"fp32"`` or ``"bf16"`` gradient accumulation (``data_types.grad_accum_dtype``); the
            DeepSpeed default (``None``) accumulates in the model dtype. ``"fp32"`` with ``bf16`` needs ZeRO >= 1.
            ``"auto"`` (the default) is ``"fp32"`` for bf16 training under ZeRO >= 1 (bf16 accumulation loses
            ~0.4% of the gradient at 8 micro-batches, ~1.4% at 128) and ``None`` otherwise (fp32 models, ZeRO-0,
            frozen models).
        memory_efficient_linear: ZeRO-3's replacement of ``F.linear`` by its own autograd function (DeepSpeed's
            default, meant for autocast memory). ``None`` (auto): DeepSpeed's default on GPU placements, off on CPU
            placements, where it cost a quarter of the update (measured: the GRPO update of a 26 M-parameter model
            3.9 s with it, 3.1 s without; the same maths, torch's fused linear).
    """
    if grad_accum_dtype == "auto":
        grad_accum_dtype = "fp32" if bf16 and train and zero_stage in (1, 2, 3) else None
    positive_ints = {"micro_batch_size_per_rank": micro_batch_size_per_rank, "grad_accum_steps": grad_accum_steps}
    positive_ints["world_size"] = world_size
    for field, value in positive_ints.items():
        _require(isinstance(value, int) and value >= 1, field, f"must be an integer >= 1, got {value!r}")
    clip_ok = isinstance(grad_clip, int | float) and math.isfinite(grad_clip) and grad_clip >= 0
    for ok, field, message in (
        (zero_stage in (0, 1, 2, 3), "zero_stage", f"must be 0, 1, 2 or 3, got {zero_stage!r}"),
        (clip_ok, "grad_clip", f"must be a finite number >= 0 (0 disables clipping), got {grad_clip!r}"),
        (not (offload_optimizer and train and zero_stage == 0), "offload_optimizer", "needs zero_stage >= 1"),
        (not (offload_params and zero_stage != 3), "offload_params", "parameter offload needs zero_stage == 3"),
        (
            grad_accum_dtype in (None, "fp32", "bf16"),
            "grad_accum_dtype",
            f"fp32, bf16 or None, not {grad_accum_dtype!r}",
        ),
        (
            not (grad_accum_dtype == "fp32" and bf16 and zero_stage == 0),
            "grad_accum_dtype",
            "fp32 with bf16 needs ZeRO",
        ),
        (not (grad_accum_dtype == "bf16" and not bf16), "grad_accum_dtype", "bf16 accumulation needs bf16=True"),
    ):
        _require(ok, field, message)
    zero: dict[str, Any] = {"stage": zero_stage}
    if zero_stage == 3:
        if memory_efficient_linear is None:
            memory_efficient_linear = device_type() == "cuda"
        zero |= {
            "stage3_param_persistence_threshold": 10_000,
            "stage3_max_live_parameters": 1e9,
            "memory_efficient_linear": bool(memory_efficient_linear),
        }
        if offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}  # pinning is a no-op on CPU hosts
    if offload_optimizer and train:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size_per_rank,
        "gradient_accumulation_steps": grad_accum_steps,
        "train_batch_size": micro_batch_size_per_rank * grad_accum_steps * world_size,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if grad_accum_dtype is not None:
        config["data_types"] = {"grad_accum_dtype": grad_accum_dtype}
    if train:
        config["gradient_clipping"] = float(grad_clip)
        config["zero_allow_untested_optimizer"] = True  # torch AdamW is "untested" for ZeRO in DeepSpeed's list
    return config


def init_distributed(
    rank: int, world_size: int, master_addr: str, master_port: int, local_rank: int = 0, timeout_s: float = 1800
) -> None:
    """Join the training process group (idempotent). Environment variables follow torchrun's convention.

    ``timeout_s`` bounds every collective: a rank that never arrives fails the others after that long.
    """
    import datetime

    apply_runtime_env()
    apply_cpu_threads()  # OMP_NUM_THREADS of the placement bundle, capped at the cores
    import deepspeed
    import torch.distributed as dist

    if dist.is_initialized():
        return
    os.environ.update(
        MASTER_ADDR=str(master_addr),
        MASTER_PORT=str(master_port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(local_rank),
    )
    deepspeed.init_distributed(dist_backend=dist_backend(), timeout=datetime.timedelta(seconds=timeout_s))


def hf_zero3_config(ds_config: dict[str, Any]):
    """An ``HfDeepSpeedConfig`` for a ZeRO-3 ``ds_config`` (``None`` otherwise). Keep it referenced while loading
    and while the model lives: every ``from_pretrained`` in the process is then partitioned at load time (use it
    around loaders other than :func:`load_causal_lm`, e.g. the critic's ``AutoModel``)."""
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    return HfDeepSpeedConfig(ds_config) if ds_config["zero_optimization"]["stage"] == 3 else None


@contextlib.contextmanager
def no_zero3_init():
    """Inside: transformers builds/loads models unpartitioned even while a ZeRO-3 ``HfDeepSpeedConfig`` is alive
    (pitfall D4). The global (a weakref in ``transformers.integrations.deepspeed``) is restored on exit, so a
    ZeRO-3 model already held by the process keeps its integration (e.g. ``synced_gpus`` in ``generate``)."""
    import transformers.integrations.deepspeed as hf_ds

    saved = hf_ds._hf_deepspeed_config_weak_ref
    hf_ds.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_ds._hf_deepspeed_config_weak_ref = saved


def load_causal_lm(model_path: str, ds_config: dict[str, Any], *, dtype=None, attn_implementation: str = "sdpa"):
    """Load a causal LM, partitioned at load time when ``ds_config`` is ZeRO-3 (unpartitioned otherwise, even if
    another ZeRO-3 config is alive in the process). Returns ``(model, hf_ds_config)``.

    Keep the returned ``hf_ds_config`` referenced for as long as the model lives (transformers looks it up weakly).
    """
    import torch
    from transformers import AutoModelForCausalLM

    hf_ds_config = hf_zero3_config(ds_config)
    kwargs = dict(dtype=dtype or torch.float32, attn_implementation=attn_implementation)
    if hf_ds_config is not None:
        return AutoModelForCausalLM.from_pretrained(model_path, **kwargs), hf_ds_config
    with no_zero3_init():
        return AutoModelForCausalLM.from_pretrained(model_path, **kwargs), None


def load_plain_model(model_path: str, dtype=None):
    """Load an unpartitioned HF causal LM, also in a process that holds a ZeRO-3 model (see :func:`no_zero3_init`)."""
    import torch
    from transformers import AutoModelForCausalLM

    with no_zero3_init():
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype or torch.float32)


def enable_gradient_checkpointing(model) -> None:
    """Activation checkpointing through HF (non-reentrant ``torch.utils.checkpoint``; works under ZeRO-3, whose
    parameter hooks re-gather during the recompute). Also turns the KV cache off. Call before :func:`initialize`.
    A model without HF's API but with an HF ``.backbone`` (the critic) gets it on the backbone."""
    target = model if hasattr(model, "gradient_checkpointing_enable") else getattr(model, "backbone", None)
    if target is None or not hasattr(target, "gradient_checkpointing_enable"):
        raise TypeError(f"{type(model).__name__} has no HF gradient_checkpointing_enable (nor a backbone with one)")
    target.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if getattr(target, "config", None) is not None:
        target.config.use_cache = False


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
    """Resolve ``impl`` for :func:`make_optimizer`: ``"auto"`` gives ``"cpu_adam"`` when ``ds_config`` offloads
    the optimizer, else ``"fused"`` on a GPU placement, else ``"torch"``; other values are checked and returned."""
    _require(impl in OPTIMIZER_IMPLS, "impl", f"must be one of {OPTIMIZER_IMPLS}, got {impl!r}")
    if impl != "auto":
        return impl
    offload = ((ds_config or {}).get("zero_optimization", {}).get("offload_optimizer") or {}).get("device")
    return "cpu_adam" if offload in ("cpu", "nvme") else "fused" if device_type() == "cuda" else "torch"


def make_optimizer(
    model,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.95),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    *,
    ds_config: dict[str, Any] | None = None,
    impl: str = "auto",
):
    """AdamW over :func:`optimizer_param_groups` (no decay on biases / norm weights), built before the engine.

    ``impl`` (see :func:`optimizer_impl` for ``"auto"``): ``"torch"`` (``torch.optim.AdamW``), ``"fused"``
    (DeepSpeed ``FusedAdam``, AdamW mode: JIT-built CUDA kernel; the only optimizer whose states ZeRO-3
    ``offload_states`` can move) or ``"cpu_adam"`` (``DeepSpeedCPUAdam``, required by ``offload_optimizer``; ~40 s
    JIT build). All three implement the same AdamW update.
    """
    import torch

    _require(lr > 0, "lr", f"must be > 0, got {lr!r}")
    impl = optimizer_impl(ds_config, impl)
    groups = optimizer_param_groups(model, weight_decay)
    if impl == "torch":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if impl == "fused":
        from deepspeed.ops.adam import FusedAdam

        return FusedAdam(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adam_w_mode=True)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adamw_mode=True)


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
    """A ``torch.optim.lr_scheduler.LambdaLR`` following :func:`lr_factor`. Pass it to :func:`initialize`: the
    engine steps it once per applied optimizer step and saves/loads it with the checkpoint. Step counts are
    optimizer steps (not micro-batches). ``total_steps`` is required for ``linear`` and ``cosine``."""
    from torch.optim.lr_scheduler import LambdaLR

    _require(schedule in SCHEDULES, "schedule", f"must be one of {SCHEDULES}, got {schedule!r}")
    _require(isinstance(warmup_steps, int) and warmup_steps >= 0, "warmup_steps", f"must be >= 0, got {warmup_steps!r}")
    _require(0.0 <= min_lr_ratio <= 1.0, "min_lr_ratio", f"must be in [0, 1], got {min_lr_ratio!r}")
    if schedule != "constant":
        _require(
            isinstance(total_steps, int) and total_steps > warmup_steps,
            "total_steps",
            f"must be an integer > warmup_steps={warmup_steps} for schedule={schedule!r}, got {total_steps!r}",
        )
    kwargs = dict(warmup_steps=warmup_steps, total_steps=total_steps, schedule=schedule, min_lr_ratio=min_lr_ratio)
    return LambdaLR(optimizer, functools.partial(lr_factor, **kwargs))


def initialize(model, ds_config: dict[str, Any], optimizer=None, lr_scheduler=None):
    """Wrap ``model`` (with a client optimizer and LR scheduler, if any) in a training engine. Returns the engine.

    ``lr_scheduler`` may be a scheduler built on ``optimizer`` or a callable ``optimizer -> scheduler``.
    """
    import deepspeed

    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=lr_scheduler, config=ds_config)
    return engine


def initialize_frozen(model, ds_config: dict[str, Any]):
    """Wrap a frozen model (reference / reward) in an engine without optimizer, in eval mode, no grads.

    Use a ``build_ds_config(train=False, ...)`` config; ZeRO-3 gives a ``DeepSpeedZeRoOffload`` engine that
    gathers each layer during forward (with ``offload_params`` the partitions stay in CPU memory between uses).
    """
    import deepspeed

    _require("optimizer" not in ds_config, "ds_config", "a frozen model's config must not define an optimizer")
    model.requires_grad_(False)
    model.eval()
    engine, *_ = deepspeed.initialize(model=model, config=ds_config)
    engine.eval()
    return engine


def backward(engine, loss, is_last: bool = True) -> None:
    """``engine.backward(loss)`` for one micro-batch of an update made of a variable number of micro-batches.

    Marks the gradient-accumulation boundary by hand (``engine.set_gradient_accumulation_boundary``): gradients
    accumulate over the micro-batches and are reduced / partitioned for the step on the one with ``is_last``;
    then call :func:`step` once. With a config of ``gradient_accumulation_steps=1`` DeepSpeed does not rescale
    the loss, so scale it yourself (e.g. by the micro-batch's share of the global token count). Every micro-batch
    must go through this function (the override persists on the engine until changed). Measured on 0.19.8:
    without the marking, ZeRO-1/2 keep only the last micro-batch's gradient; ZeRO-3 accumulates either way.
    """
    engine.set_gradient_accumulation_boundary(bool(is_last))
    engine.backward(loss)


def step(engine) -> float:
    """``engine.step()`` after the last :func:`backward` (clip, optimizer step, scheduler step, zero grads).
    Returns the learning rate this step used (the first param group's)."""
    lr = current_lr(engine)
    engine._reasonrl_grad_norm = _zero0_grad_norm(engine)
    engine.step()
    return lr


def _zero0_grad_norm(engine) -> float | None:
    """The gradient 2-norm DeepSpeed's ZeRO-0 fp32 path clips with but does not keep (``get_global_grad_norm`` is
    None there). Gradients are already all-reduced at the accumulation boundary, so the local norm is global."""
    if engine.zero_optimization_stage() != 0 or hasattr(engine.optimizer, "_global_grad_norm"):
        return None
    import torch

    grads = [p.grad.detach().float() for p in engine.module.parameters() if p.grad is not None]
    if not grads:
        return None
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def current_lr(engine) -> float:
    """The learning rate of the first param group, i.e. the one the NEXT optimizer step will use."""
    return float(engine.get_lr()[0])


def grad_norm(engine) -> float:
    """Global gradient 2-norm (before clipping) of the last :func:`step` (DeepSpeed's, or ours under ZeRO-0 fp32
    where DeepSpeed keeps none); ``nan`` if neither exists."""
    norm = engine.get_global_grad_norm()
    if norm is None:
        norm = getattr(engine, "_reasonrl_grad_norm", None)
    return float("nan") if norm is None else float(norm)


def _offload_skip_reason(engine, force: bool) -> str | None:
    from deepspeed.accelerator import get_accelerator
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum
    from deepspeed.runtime.zero.parameter_offload import DeepSpeedZeRoOffload

    if get_accelerator().device_name() == "cpu" and not force:
        return "the accelerator is the CPU: states already live in host memory"
    if engine.optimizer is None or isinstance(engine.optimizer, DeepSpeedZeRoOffload):
        return "no optimizer (frozen engine): use offload_params in its config instead"
    if not hasattr(engine.optimizer, "offload_states"):  # ZeRO-0, or the bf16 ZeRO-1 optimizer
        return f"{type(engine.optimizer).__name__} cannot offload (only the ZeRO 1-3 optimizers can)"
    param_offload = engine.zero_offload_param()
    if param_offload is not None and param_offload.device != OffloadDeviceEnum.none:
        return "parameters are already offloaded (offload_param)"
    return None


def offload_states(engine, *, force: bool = False) -> list[str]:
    """Move a training engine's ZeRO states to host memory between phases (GPU colocation). Returns the state
    names DeepSpeed was asked to offload; ``[]`` (with a log line) when skipped. Undo with :func:`reload_states`.

    Wraps ``engine.offload_states(include, device=cpu, pin_memory=True)``. Skipped (no error) when there is nothing
    to free or DeepSpeed cannot do it: on a CPU accelerator (unless ``force``, which runs the DeepSpeed code path
    anyway; tests use it), at ZeRO-0, for frozen engines, and with parameter offload. Under ZeRO-3, optimizer
    states and fp32 master weights move only with ``FusedAdam`` (DeepSpeed asserts otherwise), so with another
    optimizer only bf16/fp32 model partitions, gradient partitions and the gradient bucket move (warned). With
    ``offload_optimizer`` DeepSpeed itself leaves out the states that are already on the CPU.
    """
    reason = _offload_skip_reason(engine, force)
    if reason:
        logger.debug(f"offload_states skipped: {reason}")
        return []
    from deepspeed.ops.adam import FusedAdam
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum, OffloadStateTypeEnum

    # The ZeRO-3 parameter partitions (lp_params) stay on the device: moving them is fragile (ORZ marks it
    # "dangerous") and the weight sync gathers them right after generation starts.
    include = [s for s in OffloadStateTypeEnum if s != OffloadStateTypeEnum.lp_params]
    basic = getattr(engine.optimizer, "optimizer", None)
    if engine.zero_optimization_stage() == 3 and type(basic) is not FusedAdam and not engine.zero_use_cpu_optimizer():
        logger.warning(
            f"offload_states: ZeRO-3 can move optimizer states only for FusedAdam, not {type(basic).__name__}; "
            "they stay on the device (use make_optimizer(impl='fused'))"
        )
        include = [s for s in include if s not in (OffloadStateTypeEnum.optim_states, OffloadStateTypeEnum.hp_params)]
    engine.offload_states(include=include, device=OffloadDeviceEnum.cpu, pin_memory=True, non_blocking=False)
    return [s.value for s in include]


def reload_states(engine) -> bool:
    """Undo :func:`offload_states` (``engine.reload_states()``). Returns ``False`` when nothing was offloaded."""
    if not getattr(engine.optimizer, "offloaded_states", None):
        return False
    engine.reload_states(non_blocking=False)
    return True


def save_checkpoint(engine, ckpt_dir: str | Path, tag: str, client_state: dict[str, Any] | None = None) -> Path:
    """Save full training state (collective: every rank calls it). Returns ``ckpt_dir / tag``.

    Layout written by ``engine.save_checkpoint`` (0.19.8): ``<ckpt_dir>/<tag>/`` holds the module/engine states
    (buffers, LR scheduler, global step, ds_config, our ``client_state``) in ``mp_rank_00_model_states.pt``
    (ZeRO 0-2, rank 0 only) or ``zero_pp_rank_<r>_mp_rank_00_model_states.pt`` (ZeRO-3, every rank), and per
    rank ``[bf16_]zero_pp_rank_<r>_mp_rank_00_optim_states.pt`` (its fp32 master partition + optimizer state);
    ``<ckpt_dir>`` also gets ``latest`` (the tag) and DeepSpeed's ``zero_to_fp32.py`` / ``zero_to_torch.py``.
    Resuming needs the same world size (no universal-checkpoint conversion here). ``client_state`` is pickled
    (anything picklable: step counters, RNG states) and returned by :func:`load_checkpoint`. I/O errors raise.
    """
    ckpt_dir = Path(ckpt_dir)
    ok = engine.save_checkpoint(str(ckpt_dir), tag=str(tag), client_state={CLIENT_STATE_KEY: client_state or {}})
    if ok is False:
        raise RuntimeError(f"DeepSpeed failed to save checkpoint {ckpt_dir / str(tag)}")
    return ckpt_dir / str(tag)


def load_checkpoint(engine, ckpt_dir: str | Path, tag: str | None = None, *, load_optimizer: bool = True) -> dict:
    """Restore what :func:`save_checkpoint` wrote (collective) and return its ``client_state``.

    Parameters, optimizer state (incl. LR of each group) and the LR scheduler are restored (``load_optimizer=False``
    restores parameters only). ``tag=None`` reads ``<ckpt_dir>/latest``. Load into a freshly initialised engine:
    DeepSpeed documents that a ZeRO-3 engine cannot load right after saving in the same engine. A missing
    checkpoint raises ``FileNotFoundError`` (DeepSpeed itself only warns and returns ``None``).
    """
    ckpt_dir = Path(ckpt_dir)
    if tag is not None and not (ckpt_dir / str(tag)).is_dir():
        raise FileNotFoundError(f"no checkpoint {ckpt_dir / str(tag)}")
    path, states = engine.load_checkpoint(
        str(ckpt_dir),
        tag=None if tag is None else str(tag),
        load_optimizer_states=load_optimizer,
        load_lr_scheduler_states=load_optimizer,
        load_module_only=not load_optimizer,
    )
    if path is None:
        raise FileNotFoundError(f"no checkpoint to load in {ckpt_dir} (tag={tag!r}, no 'latest' file?)")
    return (states or {}).get(CLIENT_STATE_KEY, {})


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def full_param_sizes(module) -> list[tuple[str, int]]:
    """``(name, full size in bytes)`` of every parameter in ``named_parameters()`` order (full shape even when
    ZeRO-3 partitioned: ``ds_numel``). Identical on every rank, so any bucket plan made from it is too."""
    return [(n, getattr(p, "ds_numel", p.numel()) * p.element_size()) for n, p in module.named_parameters()]


def gather_params(module, names, *, rank0_only: bool = True, device: str | None = "cpu") -> dict[str, Any]:
    """Full copies of the named parameters with ONE ``zero.GatheredParameters`` all-gather. Collective: every
    rank calls it with the same names. Returns ``{name: tensor}`` on rank 0 (all ranks if not ``rank0_only``),
    ``{}`` elsewhere. Tensors are fresh copies on ``device`` (``None``: the parameter's device); parameters that
    are not partitioned (ZeRO 0-2, small persistent ZeRO-3 ones) are copied without communication."""
    import deepspeed

    by_name = dict(module.named_parameters())
    missing = [n for n in names if n not in by_name]
    _require(not missing, "names", f"not parameters of the module: {missing[:5]}")
    params = [by_name[n] for n in names]
    if rank0_only and _gathers_partitions_to_rank0(params):
        tensors = _gather_partitions_to_rank0(params)
        if tensors is None:
            return {}
        return {n: t.to(device or by_name[n].device) for n, t in zip(names, tensors, strict=True)}
    keep = _rank() == 0 or not rank0_only
    with deepspeed.zero.GatheredParameters([by_name[n] for n in names], modifier_rank=None):  # no-op if unpartitioned
        if not keep:
            return {}
        return {n: by_name[n].data.detach().to(device or by_name[n].device, copy=True) for n in names}


def _gathers_partitions_to_rank0(params) -> bool:
    """Gather ZeRO-3 partitions straight to rank 0 (point-to-point) instead of ``GatheredParameters``' all-gather?

    Only over gloo: there an all-gather moves every byte to every rank and measured 2.7x slower than a gather to one
    rank (513 MiB over 2 CPU ranks: 0.75 s vs 0.28 s). NCCL keeps the all-gather (its fastest collective; a gather
    is point-to-point there). Needs DeepSpeed's flat partition layout: rank r holds elements
    ``[r * size, (r + 1) * size)`` of the flattened parameter in ``ds_tensor`` (``size = ceil(numel / world)``).
    """
    import torch.distributed as dist

    if not (dist.is_initialized() and dist.get_backend() == "gloo" and dist.get_world_size() > 1):
        return False
    world = dist.get_world_size()
    return len({getattr(p, "ds_tensor", p).dtype for p in params}) == 1 and all(
        getattr(p, "ds_tensor", None) is not None
        and p.ds_tensor.numel() * world == getattr(p, "ds_numel_aligned", -1)
        and p.ds_tensor.numel() * world >= p.ds_numel
        for p in params
    )


def _gather_partitions_to_rank0(params) -> list[Any] | None:
    """Full copies of ZeRO-3 parameters on rank 0: every other rank sends each partition point-to-point, received
    straight into its place in one flat buffer (no concatenation on the senders, no reshuffle on rank 0, nothing
    sent to itself). Collective. Returns the tensors (rank 0, on the partitions' device) or ``None`` elsewhere.

    The tensors returned are consecutive views of that flat buffer, which a transport can send as one buffer
    without packing it again.
    """
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()

    def valid(p, r: int) -> int:  # elements of rank r's partition inside the parameter (the rest is padding)
        size = p.ds_tensor.numel()
        return max(0, min(size, p.ds_numel - r * size))

    if rank != 0:
        sends = [
            dist.isend(p.ds_tensor.detach().reshape(-1)[: valid(p, rank)], dst=0, tag=i)
            for i, p in enumerate(params)
            if valid(p, rank)
        ]
        for work in sends:
            work.wait()
        return None
    dtype, device = params[0].ds_tensor.dtype, params[0].ds_tensor.device
    flat = torch.empty(sum(p.ds_numel for p in params), dtype=dtype, device=device)
    full, receives, offset = [], [], 0
    for i, p in enumerate(params):
        dst = flat[offset : offset + p.ds_numel]  # rank r's partition is elements [r * size, r * size + valid)
        size = p.ds_tensor.numel()
        for r in range(1, world):
            if valid(p, r):
                receives.append(dist.irecv(dst[r * size : r * size + valid(p, r)], src=r, tag=i))
        dst[: valid(p, 0)].copy_(p.ds_tensor.detach().reshape(-1)[: valid(p, 0)])
        full.append(dst.view(p.ds_shape))
        offset += p.ds_numel
    for work in receives:
        work.wait()
    return full


def split_by_size(items: list[tuple[Any, int]], limit: int) -> list[list[Any]]:
    """Split ``(item, size in bytes)`` pairs, in order, into consecutive groups whose sizes sum to <= ``limit``;
    an item larger than ``limit`` forms its own group. Used for gather buckets and for export shards."""
    groups: list[list[Any]] = []
    size = 0
    for item, nbytes in items:
        if not groups or size + nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += nbytes
    return groups


def iter_full_params(
    module, bucket_bytes: int = DEFAULT_BUCKET_BYTES, *, rank0_only: bool = True, device: str | None = "cpu"
) -> Iterator[list[tuple[str, Any]]]:
    """Full parameters in buckets: yields lists of ``(name, tensor)`` whose full sizes sum to <= ``bucket_bytes``
    (a larger tensor forms its own bucket), in ``named_parameters()`` order (tied weights once; no buffers).

    Collective: every rank must iterate to the end, in step (one :func:`gather_params` all-gather per bucket).
    Buckets come from :func:`full_param_sizes`, so they are identical on all ranks. Every rank receives the same
    names; with ``rank0_only`` the other ranks get ``None`` instead of tensors.
    """
    _require(bucket_bytes > 0, "bucket_bytes", f"must be > 0, got {bucket_bytes!r}")
    for names in split_by_size(full_param_sizes(module), bucket_bytes):
        tensors = gather_params(module, names, rank0_only=rank0_only, device=device)
        yield [(n, tensors.get(n)) for n in names]


def gather_full_state_dict(
    module, rank0_only: bool = True, bucket_bytes: int = DEFAULT_BUCKET_BYTES
) -> dict[str, Any] | None:
    """Full (unpartitioned) parameters of a possibly ZeRO-3-partitioned module, as CPU tensors keyed by HF name.

    Collective: every rank must call it (bucketed through :func:`iter_full_params`). Persistent buffers are
    included (they are never partitioned); derived ones such as rotary ``inv_freq`` are not, exactly as in
    ``state_dict()``. With ``rank0_only`` the other ranks return ``None``.
    """
    keep = _rank() == 0 or not rank0_only
    state: dict[str, Any] = {}
    for bucket in iter_full_params(module, bucket_bytes, rank0_only=rank0_only):
        if keep:
            state.update(bucket)
    return (state | persistent_buffers(module)) if keep else None


def persistent_buffer_names(module) -> list[str]:
    """Names of the buffers ``module.state_dict()`` would contain (non-persistent ones excluded)."""
    names = []
    for prefix, sub in module.named_modules():
        for name, buf in sub._buffers.items():
            if buf is not None and name not in sub._non_persistent_buffers_set:
                names.append(f"{prefix}.{name}" if prefix else name)
    return names


def persistent_buffers(module) -> dict[str, Any]:
    """The buffers ``module.state_dict()`` would contain (non-persistent ones excluded), as CPU tensors."""
    return {name: module.get_buffer(name).detach().cpu().clone() for name in persistent_buffer_names(module)}

"""The DeepSpeed adapter: the only module in reasonrl that calls DeepSpeed.

It joins the torch.distributed group (``nccl`` on GPU, ``gloo`` on CPU), loads Hugging Face models partitioned
under ZeRO-3, builds the optimizer, wraps models in training or frozen engines, offloads/reloads engine states
between phases, saves/loads full training state and gathers full parameters back. What needs no DeepSpeed call
lives beside it: the config dict (:mod:`reasonrl.distributed.ds_config`), parameter groups and the LR schedule
(:mod:`reasonrl.distributed.optim_setup`), the point-to-point gather of partitions, buckets and buffers
(:mod:`reasonrl.distributed.param_gather`). A DeepSpeed upgrade should only need to touch this file (and
``ds_config`` where the config schema changes). Facts it relies on (DeepSpeed 0.19.8, transformers 5.19,
torch 2.13; measured on CPU unless marked otherwise):

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
* On CPU every process group builds DeepSpeed's shared-memory collective op (``ShareMemCommBuilder``, a g++ JIT
  build of ~25 s, cached per Python environment in ``~/.cache/torch_extensions``); :func:`build_cpu_comm_op` builds
  it at install time (``python -m reasonrl.prepare``) so the first run does not pay it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.distributed.ds_config import require_field
from reasonrl.distributed.optim_setup import TORCH_FUSED, fused_or_fallback, optimizer_impl, optimizer_param_groups
from reasonrl.distributed.param_gather import (
    FlatPartition,
    gather_partitions_to_rank0,
    gather_to_rank0_pays,
    persistent_buffers,
    split_by_size,
)
from reasonrl.distributed.platform import apply_cpu_threads, apply_runtime_env, dist_backend

CLIENT_STATE_KEY = "reasonrl_client_state"  # our client_state lives under this one key of the DeepSpeed checkpoint
DEFAULT_BUCKET_BYTES = 256 * 1024**2


def build_cpu_comm_op() -> str | None:
    """Build (or load, when cached) DeepSpeed's shared-memory collective op of CPU process groups through its public
    op builder, as ``deepspeed.comm`` would on its first group. Returns the op's name, or None where the machine's
    accelerator has no such op (GPU machines) or DeepSpeed reports it incompatible."""
    apply_runtime_env()  # the variables the workers see, so the cached build is the one they load
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None
    builder.load(verbose=False)
    return builder.absolute_name()


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

    from reasonrl.models.vision import auto_model_class

    model_class = auto_model_class(model_path)  # a vision-language model loads with its image-text class
    hf_ds_config = hf_zero3_config(ds_config)
    kwargs = dict(dtype=dtype or torch.float32, attn_implementation=attn_implementation)
    if hf_ds_config is not None:
        return model_class.from_pretrained(model_path, **kwargs), hf_ds_config
    with no_zero3_init():
        return model_class.from_pretrained(model_path, **kwargs), None


def load_plain_model(model_path: str, dtype=None):
    """Load an unpartitioned HF causal LM, also in a process that holds a ZeRO-3 model (see :func:`no_zero3_init`)."""
    import torch

    from reasonrl.models.vision import auto_model_class

    with no_zero3_init():
        return auto_model_class(model_path).from_pretrained(model_path, dtype=dtype or torch.float32)


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
    JIT build). All implement the same AdamW update. When ``"auto"`` picks ``"fused"`` but FusedAdam can be neither
    loaded pre-built nor JIT-built (:func:`fused_adam_build_problem`: no ``nvcc``, or one whose CUDA differs from
    torch's), it falls back to ``torch.optim.AdamW(fused=True)`` with one warning instead of DeepSpeed's
    ``CUDAMismatchException`` / ``MissingCUDAException`` at start-up; an explicit ``impl="fused"`` is not changed.
    """
    import torch

    require_field(lr > 0, "lr", f"must be > 0, got {lr!r}")
    requested, impl = impl, optimizer_impl(ds_config, impl)
    if impl == "fused" and requested == "auto":
        impl, warning = fused_or_fallback(fused_adam_build_problem())
        if warning:
            _warn_once(warning)
    groups = optimizer_param_groups(model, weight_decay)
    if impl == "torch":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if impl == TORCH_FUSED:
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
    if impl == "fused":
        from deepspeed.ops.adam import FusedAdam

        return FusedAdam(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adam_w_mode=True)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adamw_mode=True)


def fused_adam_build_problem() -> str | None:
    """Why DeepSpeed's ``FusedAdam`` cannot load in this process, or None when it can: pre-built into the install
    (``DS_BUILD_FUSED_ADAM=1``: ``deepspeed.git_version_info.installed_ops``, what ``OpBuilder.load`` checks first),
    already loaded, or JIT-buildable: ``nvcc`` under ``CUDA_HOME`` whose CUDA major.minor matches torch's
    (``op_builder/builder.py`` ``assert_no_cuda_mismatch``, which raises ``MissingCUDAException`` /
    ``CUDAMismatchException``; ``DS_SKIP_CUDA_CHECK=1`` is honoured there), the builder's own compatibility
    check, and ninja. Asks the builder only; compiles nothing."""
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import accelerator_name, installed_ops
    from deepspeed.ops.op_builder import FusedAdamBuilder
    from deepspeed.ops.op_builder.builder import (
        CUDAMismatchException,
        MissingCUDAException,
        OpBuilder,
        assert_no_cuda_mismatch,
    )

    name = FusedAdamBuilder.NAME
    if name in OpBuilder._loaded_ops or (installed_ops.get(name) and accelerator_name == get_accelerator()._name):
        return None
    try:
        assert_no_cuda_mismatch(name)
    except (MissingCUDAException, CUDAMismatchException) as err:
        return str(err).lstrip(">- ")
    builder = FusedAdamBuilder()
    if not builder.is_compatible(verbose=False):
        return f"DeepSpeed reports {name} incompatible: {getattr(builder, 'error_log', None) or 'no reason given'}"
    from torch.utils.cpp_extension import verify_ninja_availability

    try:
        verify_ninja_availability()
    except RuntimeError:
        return "ninja is not installed (the JIT build needs it)"
    return None


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """Log ``message`` once per process (every ZeRO rank and role builds its optimizer in its own process)."""
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


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

    require_field("optimizer" not in ds_config, "ds_config", "a frozen model's config must not define an optimizer")
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
    require_field(not missing, "names", f"not parameters of the module: {missing[:5]}")
    parts = _flat_partitions([by_name[n] for n in names]) if rank0_only and gather_to_rank0_pays() else None
    if parts is not None:  # gloo: the partitions go point-to-point to rank 0 (param_gather)
        tensors = gather_partitions_to_rank0(parts)
        if tensors is None:
            return {}
        return {n: t.to(device or by_name[n].device) for n, t in zip(names, tensors, strict=True)}
    keep = _rank() == 0 or not rank0_only
    with deepspeed.zero.GatheredParameters([by_name[n] for n in names], modifier_rank=None):  # no-op if unpartitioned
        if not keep:
            return {}
        return {n: by_name[n].data.detach().to(device or by_name[n].device, copy=True) for n in names}


def _flat_partitions(params) -> list[FlatPartition] | None:
    """The ZeRO-3 partitions of ``params`` as :class:`FlatPartition` s, or ``None`` unless every one is in
    DeepSpeed's flat partition layout (0.19.8: ``ds_tensor`` holds elements ``[r * size, (r + 1) * size)`` of the
    flattened parameter, ``size * world == ds_numel_aligned >= ds_numel``) and all share one dtype."""
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    if len({getattr(p, "ds_tensor", p).dtype for p in params}) != 1:
        return None
    for p in params:
        local = getattr(p, "ds_tensor", None)
        if local is None or not (local.numel() * world == getattr(p, "ds_numel_aligned", -1) >= p.ds_numel):
            return None
    return [FlatPartition(local=p.ds_tensor, numel=p.ds_numel, shape=p.ds_shape) for p in params]


def _gathers_partitions_to_rank0(params) -> bool:
    """Whether :func:`gather_params` (``rank0_only``) sends these parameters' partitions point-to-point to rank 0
    (:func:`~reasonrl.distributed.param_gather.gather_to_rank0_pays` and the flat layout) rather than all-gathering."""
    return gather_to_rank0_pays() and _flat_partitions(params) is not None


def iter_full_params(
    module, bucket_bytes: int = DEFAULT_BUCKET_BYTES, *, rank0_only: bool = True, device: str | None = "cpu"
) -> Iterator[list[tuple[str, Any]]]:
    """Full parameters in buckets: yields lists of ``(name, tensor)`` whose full sizes sum to <= ``bucket_bytes``
    (a larger tensor forms its own bucket), in ``named_parameters()`` order (tied weights once; no buffers).

    Collective: every rank must iterate to the end, in step (one :func:`gather_params` all-gather per bucket).
    Buckets come from :func:`full_param_sizes`, so they are identical on all ranks. Every rank receives the same
    names; with ``rank0_only`` the other ranks get ``None`` instead of tensors.
    """
    require_field(bucket_bytes > 0, "bucket_bytes", f"must be > 0, got {bucket_bytes!r}")
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

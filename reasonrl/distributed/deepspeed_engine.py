"""The DeepSpeed adapter: the only module in reasonrl that calls DeepSpeed.

It builds DeepSpeed configs, joins the torch.distributed group (``nccl`` on GPU, ``gloo`` on CPU), loads Hugging
Face models partitioned under ZeRO-3 and gathers full parameters back. Facts it relies on (DeepSpeed 0.19.8,
transformers 5.19, measured on CPU):

* ZeRO-3 loading must go through transformers' ``HfDeepSpeedConfig`` (kept alive while ``from_pretrained`` runs):
  transformers then builds the model under ``deepspeed.zero.Init`` and loads the checkpoint shard-wise. A raw
  ``zero.Init`` around ``from_pretrained`` crashes in ``_init_weights``.
* While an ``HfDeepSpeedConfig`` is alive, any other ``from_pretrained`` in the process is partitioned too; use
  :func:`load_plain_model` (which unsets it) for an unpartitioned model.
* A client ``torch.optim.AdamW`` avoids DeepSpeed's JIT-compiled FusedAdam / CPUAdam on CPU (80 s / 40 s builds).
"""

from __future__ import annotations

import os
from typing import Any

from reasonrl.distributed.platform import apply_runtime_env, dist_backend


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
) -> dict[str, Any]:
    """A DeepSpeed config dict. ``train=False`` gives an inference-only config (frozen reference / reward)."""
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    zero: dict[str, Any] = {"stage": zero_stage}
    if zero_stage == 3:
        zero |= {"stage3_param_persistence_threshold": 10_000, "stage3_max_live_parameters": 1e9}
        if offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    if offload_optimizer and train and zero_stage > 0:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch_size_per_rank,
        "gradient_accumulation_steps": grad_accum_steps,
        "train_batch_size": micro_batch_size_per_rank * grad_accum_steps * world_size,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if train:
        config["gradient_clipping"] = grad_clip
        config["zero_allow_untested_optimizer"] = True
    return config


def init_distributed(
    rank: int, world_size: int, master_addr: str, master_port: int, local_rank: int = 0, timeout_s: float = 1800
) -> None:
    """Join the training process group (idempotent). Environment variables follow torchrun's convention.

    ``timeout_s`` bounds every collective: a rank that never arrives fails the others after that long.
    """
    import datetime

    apply_runtime_env()
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


def load_causal_lm(model_path: str, ds_config: dict[str, Any], *, dtype=None, attn_implementation: str = "sdpa"):
    """Load a causal LM, partitioned at load time when ``ds_config`` is ZeRO-3. Returns ``(model, hf_ds_config)``.

    Keep the returned ``hf_ds_config`` referenced for as long as the model lives (transformers looks it up weakly).
    """
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations.deepspeed import HfDeepSpeedConfig

    hf_ds_config = HfDeepSpeedConfig(ds_config) if ds_config["zero_optimization"]["stage"] == 3 else None
    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=dtype or torch.float32, attn_implementation=attn_implementation
    )
    return model, hf_ds_config


def load_plain_model(model_path: str, dtype=None):
    """Load an unpartitioned HF causal LM in a process that may hold a ZeRO-3 model (unsets the global config)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype or torch.float32)


def initialize(model, ds_config: dict[str, Any], optimizer=None):
    """Wrap ``model`` (and a client optimizer, if any) in a DeepSpeed engine. Returns the engine."""
    import deepspeed

    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config)
    return engine


def gather_full_state_dict(module, rank0_only: bool = True) -> dict[str, Any] | None:
    """Full (unpartitioned) parameters of a possibly ZeRO-3-partitioned module, as CPU tensors keyed by HF name.

    Collective: every rank must call it. Persistent buffers are included (they are never partitioned); derived
    ones such as rotary ``inv_freq`` are not, exactly as in ``state_dict()``. With
    ``rank0_only`` the other ranks return ``None``.
    """
    import deepspeed
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_initialized() else 0
    state: dict[str, Any] = {}
    for name, param in module.named_parameters():
        if hasattr(param, "ds_id"):  # partitioned by ZeRO-3: gather this one tensor, copy it out, release it
            with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
                if rank == 0 or not rank0_only:
                    state[name] = param.data.detach().cpu().clone()
        elif rank == 0 or not rank0_only:
            state[name] = param.data.detach().cpu().clone()
    if rank == 0 or not rank0_only:
        state |= persistent_buffers(module)
    return state if (rank == 0 or not rank0_only) else None


def persistent_buffers(module) -> dict[str, Any]:
    """The buffers ``module.state_dict()`` would contain (non-persistent ones excluded), as CPU tensors."""
    out = {}
    for prefix, sub in module.named_modules():
        for name, buf in sub._buffers.items():
            if buf is not None and name not in sub._non_persistent_buffers_set:
                out[f"{prefix}.{name}" if prefix else name] = buf.detach().cpu().clone()
    return out

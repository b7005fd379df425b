"""The memory model of a config: :func:`setup_from_config` turns a ``BasePPOExpConfig`` into the plain
:class:`~reasonrl.planning.memory_model.Setup` the model takes (the model knows no config). Validation uses it
(:mod:`reasonrl.config.consistency`), and so do the recipes' tables (``python -m playground memory --all``).

The memory model is imported inside the function: it belongs to ``distributed/`` (a reach-up of ``config/``, listed
in ``tests/test_layout.py``), and reading a config must not need it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig
    from reasonrl.planning.memory_model import ModelShape, Setup


def setup_from_config(cfg: BasePPOExpConfig, model: ModelShape | None = None, device_bytes: int | None = None) -> Setup:
    """The :class:`Setup` of ``cfg``; ``model`` defaults to ``QWEN25[cfg.pretrain]`` (a Hub id at any revision),
    ``device_bytes`` to an 80 GB device. Raises KeyError for a model without a known shape."""
    from reasonrl.config.zero_stages import ROLES, role_zero_stage
    from reasonrl.planning import memory_model

    shape = model or memory_model.QWEN25.get((cfg.pretrain or "").partition("@")[0])
    if shape is None:
        raise KeyError(f"pretrain={cfg.pretrain!r}: no model shape known; pass model=ModelShape(...) from its config")
    return memory_model.Setup(
        model=shape,
        zero_stage=role_zero_stage(cfg, "policy"),
        # each role at the stage its workers get (zero_stage=auto resolves per role); the model names the reward model
        role_zero_stages=tuple(
            ("reward_model" if role == "reward" else role, role_zero_stage(cfg, role)) for role in ROLES
        ),
        policy_dp=cfg.policy_world_size,
        critic_dp=cfg.critic_world_size if cfg.use_critic else 0,
        # a reference inside the policy's processes (reference_process) still holds its weights: only LoRA's has none
        ref_dp=cfg.ref_num_nodes * cfg.ref_devices_per_node if cfg.use_reference and not cfg.use_lora else 0,
        teacher_dp=cfg.ref_num_nodes * cfg.ref_devices_per_node if cfg.use_teacher else 0,
        reward_dp=cfg.reward_num_nodes * cfg.reward_devices_per_node if cfg.use_reward_model else 0,
        bf16=cfg.bf16,
        gradient_checkpointing=cfg.gradient_checkpointing,
        optimizer_offload=cfg.optimizer_offload,
        ref_offload_params=cfg.ref_offload_params,
        micro_batch_tokens=cfg.max_tokens_per_micro_batch,
        vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        vllm_tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        vllm_enable_sleep=cfg.vllm_enable_sleep,
        colocate_all=cfg.colocate_all,
        sync_bucket_mb=cfg.sync_bucket_mb,
        device_bytes=device_bytes or memory_model.DEVICE_BYTES,
        lora_rank=cfg.lora_rank,
        sequence_parallel_size=cfg.sequence_parallel_size,
    )

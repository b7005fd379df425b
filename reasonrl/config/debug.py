"""The ``DEBUG_MODE`` shrink of a config (``BasePPOExpConfig.apply_debug_mode`` delegates here)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from reasonrl.config.names import GROUP_ESTIMATORS

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig

# Caps of a debug run: a few steps of short prompts and responses, then it stops. 512 prompt tokens keep ORZ's
# template whole (prompts are left-truncated); 512 + 256 tokens fit the context of tiny (2048) and smollm2 (8192).
DEBUG_MAX_STEPS = 3
DEBUG_MAX_PROMPT_LEN = 512
DEBUG_GENERATE_MAX_LEN = 256


def shrink_for_debug(cfg: BasePPOExpConfig):
    """A shrunk copy of ``cfg``: see :meth:`BasePPOExpConfig.apply_debug_mode`."""
    n_min = 2 if (cfg.advantage_estimator in GROUP_ESTIMATORS or cfg.dynamic_sampling) else 1
    n = max(min(cfg.n_samples_per_prompt, 4), n_min)
    rollout = min(cfg.rollout_batch_size, 4)
    samples = max(rollout * n, 1)

    def mini_batch(size: int | None) -> int | None:
        if size is None or size < 1:
            return size
        steps = max(cfg.rollout_samples_per_step // size, 1)
        steps = next(k for k in range(min(steps, samples), 0, -1) if samples % k == 0)
        return None if steps == 1 else samples // steps

    gen = min(cfg.generate_max_len, DEBUG_GENERATE_MAX_LEN)
    overlong = cfg.overlong_buffer_len
    if overlong > 0 and cfg.generate_max_len > 0:
        overlong = max(1, min(gen, round(overlong * gen / cfg.generate_max_len)))
    name = cfg.exp_name if cfg.exp_name.endswith("-debug") else f"{cfg.exp_name}-debug"
    return dataclasses.replace(
        cfg,
        exp_name=name,
        debug=True,
        policy_num_nodes=1,
        policy_devices_per_node=1,
        ref_num_nodes=1,
        ref_devices_per_node=1,
        critic_num_nodes=1,
        critic_devices_per_node=1,
        reward_num_nodes=min(cfg.reward_num_nodes, 1),
        reward_devices_per_node=1,
        vllm_num_engines=1,
        vllm_tensor_parallel_size=1,
        colocate_all=True,
        vllm_gpu_memory_utilization=min(cfg.vllm_gpu_memory_utilization, 0.5),
        vllm_max_model_len=None,
        rollout_batch_size=rollout,
        n_samples_per_prompt=n,
        train_batch_size=mini_batch(cfg.train_batch_size),
        critic_train_batch_size=mini_batch(cfg.critic_train_batch_size),
        policy_update_steps=None if cfg.policy_update_steps is None else min(cfg.policy_update_steps, samples),
        critic_update_steps=None if cfg.critic_update_steps is None else min(cfg.critic_update_steps, samples),
        max_prompt_len=min(cfg.max_prompt_len, DEBUG_MAX_PROMPT_LEN),
        generate_max_len=gen,
        max_steps=DEBUG_MAX_STEPS if cfg.max_steps is None else min(cfg.max_steps, DEBUG_MAX_STEPS),
        overlong_buffer_len=overlong,
        eval_max_prompts=min(cfg.eval_max_prompts or 8, 8),
        eval_n_samples=min(cfg.eval_n_samples, 2),
        eval_interval=min(cfg.eval_interval, 2),
        save_interval=min(cfg.save_interval, 2),
    )

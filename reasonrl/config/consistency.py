"""Cross-field rules of a config: the algorithm's settings together, batch divisibility and sequence lengths."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reasonrl.config.names import GROUP_ESTIMATORS
from reasonrl.config.probes import _model_max_positions

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def _check_algorithm(cfg: BasePPOExpConfig) -> list[str]:
    problems = []
    est, n = cfg.advantage_estimator, cfg.n_samples_per_prompt
    if est in GROUP_ESTIMATORS and n < 2:
        problems.append(
            f"advantage_estimator={est!r} compares the samples of each prompt, so n_samples_per_prompt={n} "
            "gives every sample advantage 0: set n_samples_per_prompt >= 2 (typically 8-64), or use gae"
        )
    if est == "remax":
        problems.append(
            "advantage_estimator='remax' needs a greedy baseline rollout per prompt, which the trainer does not "
            "run yet (reasonrl.algos.remax_advantages exists for custom loops): use grpo, rloo or gae"
        )
    if cfg.dynamic_sampling and n < 2:
        problems.append(
            f"dynamic_sampling drops prompt groups with equal rewards, so n_samples_per_prompt={n} drops all: "
            "set n_samples_per_prompt >= 2 or dynamic_sampling=false"
        )
    if cfg.use_critic and cfg.critic_num_nodes == 0:
        problems.append(
            "advantage_estimator='gae' trains a critic but critic_num_nodes=0: set critic_num_nodes >= 1 "
            "(under colocate_all equal to the policy's sizes), or use a critic-free estimator such as grpo"
        )
    if cfg.kl_mode != "none":
        if not cfg.init_kl_coef > 0:
            problems.append(
                f"kl_mode={cfg.kl_mode!r} needs init_kl_coef > 0 (typical 1e-3), or set kl_mode=none to run "
                "without a reference model"
            )
        if cfg.ref_num_nodes == 0:
            problems.append(
                f"kl_mode={cfg.kl_mode!r} needs a reference model but ref_num_nodes=0: set ref_num_nodes >= 1 "
                "(under colocate_all equal to the policy's sizes) or kl_mode=none"
            )
    elif cfg.init_kl_coef > 0:
        problems.append(
            f"init_kl_coef={cfg.init_kl_coef} has no effect with kl_mode='none': set kl_mode=loss or "
            "kl_mode=reward (this also starts the reference model), or init_kl_coef=0"
        )
    if cfg.kl_controller == "adaptive":
        if cfg.kl_mode == "none":
            problems.append("kl_controller='adaptive' has no effect with kl_mode='none': set kl_mode or use fixed")
        if cfg.kl_target is None:
            problems.append("kl_controller='adaptive' needs kl_target (e.g. kl_target=0.1), or use kl_controller=fixed")
        if cfg.kl_horizon < 1:
            problems.append(f"kl_horizon={cfg.kl_horizon}: the adaptive KL controller needs kl_horizon >= 1")
    if cfg.dual_clip_c is not None and cfg.policy_loss != "ppo":
        problems.append(
            f"dual_clip_c={cfg.dual_clip_c} applies to policy_loss='ppo' only (got {cfg.policy_loss!r}): "
            "set dual_clip_c=none or policy_loss=ppo"
        )
    if cfg.policy_loss == "reinforce" and (
        cfg.policy_update_steps != 1 or cfg.policy_mini_batch_size != cfg.rollout_samples_per_step
    ):
        problems.append(
            "policy_loss='reinforce' has no importance ratio, so it is correct only on-policy: set "
            "policy_update_steps=1 and train_batch_size=none (one step over the whole rollout), or use ppo"
        )
    if cfg.adaptive_entropy:
        lo, hi = cfg.entropy_coef_min, cfg.entropy_coef_max
        if not lo <= hi:
            problems.append(f"entropy_coef_min={lo} > entropy_coef_max={hi}: make min <= max")
        elif not lo <= cfg.entropy_coef <= hi:
            problems.append(
                f"entropy_coef={cfg.entropy_coef} (the adaptive controller's start) is outside "
                f"[entropy_coef_min, entropy_coef_max] = [{lo}, {hi}]: move it inside"
            )
    if cfg.eval_n_samples > 1 and cfg.eval_temperature == 0:
        problems.append(
            f"eval_n_samples={cfg.eval_n_samples} with eval_temperature=0 (greedy) gives {cfg.eval_n_samples} "
            "identical samples: set eval_temperature > 0 (e.g. 0.6 or 1.0), or eval_n_samples=1"
        )
    return problems


def _check_batches(cfg: BasePPOExpConfig) -> list[str]:
    problems: list[str] = []
    if cfg.rollout_batch_size < 1 or cfg.n_samples_per_prompt < 1:
        return problems  # reported by _check_ranges
    samples = cfg.rollout_samples_per_step
    what = f"rollout_batch_size {cfg.rollout_batch_size} x n_samples_per_prompt {cfg.n_samples_per_prompt}"
    policy_ok = True
    roles = [("train_batch_size", cfg.train_batch_size, "policy", cfg.policy_world_size)]
    if cfg.use_critic:
        roles.append(("critic_train_batch_size", cfg.critic_train_batch_size, "critic", cfg.critic_world_size))
    for name, size, role, world in roles:
        inherited = role == "critic" and size is None  # the critic uses the policy's mini-batch
        if (size is not None and size < 1) or (inherited and not policy_ok):
            continue  # reported by _check_ranges / for the policy
        if size is not None and samples % size:
            problems.append(
                f"{name}={size} does not divide the {samples} rollout samples per step ({what}): use a divisor "
                f"of {samples} such as {_divisors_near(samples, size)}, or {name}=none"
            )
            policy_ok = False
            continue
        mini = cfg.policy_mini_batch_size if role == "policy" else cfg.critic_mini_batch_size
        if world >= 1 and mini % world:
            policy_ok = policy_ok and role != "policy"
            if inherited:
                shown = f"critic_train_batch_size=none (the policy's mini-batch of {mini} samples)"
            elif size is None:
                shown = f"{name}=none (the whole rollout, {mini} samples)"
            else:
                shown = f"{name}={size}"
            problems.append(
                f"{shown} is not divisible by the {role} data-parallel world size {world} ({role}_num_nodes x "
                f"{role}_devices_per_node), so ranks would get unequal shares: set {name} to a multiple of "
                f"{world} that divides {samples} ({what}), or change the {role} sizes"
            )
    if cfg.vllm_num_engines >= 1 and samples % cfg.vllm_num_engines:
        problems.append(
            f"the {samples} rollout samples per step ({what}) do not split evenly over vllm_num_engines="
            f"{cfg.vllm_num_engines}: make rollout_batch_size * n_samples_per_prompt a multiple of "
            f"{cfg.vllm_num_engines}, or change vllm_num_engines"
        )
    return problems


def _check_lengths(cfg: BasePPOExpConfig) -> list[str]:
    problems = []
    total = cfg.max_prompt_len + cfg.generate_max_len
    fix = "lower generate_max_len or max_prompt_len"
    if cfg.vllm_max_model_len is not None and total > cfg.vllm_max_model_len:
        problems.append(
            f"max_prompt_len {cfg.max_prompt_len} + generate_max_len {cfg.generate_max_len} = {total} tokens do "
            f"not fit vllm_max_model_len={cfg.vllm_max_model_len}: {fix}, or raise vllm_max_model_len "
            "(none = the sum)"
        )
    if total > cfg.max_tokens_per_micro_batch:
        problems.append(
            f"max_tokens_per_micro_batch={cfg.max_tokens_per_micro_batch} cannot hold one full sample "
            f"(max_prompt_len + generate_max_len = {total} tokens): raise it to >= {total}, or {fix}"
        )
    for name in ("pretrain", "critic_pretrain" if cfg.use_critic else None):
        value = getattr(cfg, name) if name else None
        if value is None:
            continue
        limit = _model_max_positions(value)
        if limit is not None and total > limit:
            room = limit - cfg.max_prompt_len
            fix_len = (
                f"set generate_max_len <= {room} or lower max_prompt_len"
                if room >= 1
                else f"lower max_prompt_len (now {cfg.max_prompt_len}) well below {limit}, then generate_max_len"
            )
            problems.append(
                f"max_prompt_len {cfg.max_prompt_len} + generate_max_len {cfg.generate_max_len} = {total} "
                f"tokens exceed the context of {name}={value!r} (max_position_embeddings {limit}): {fix_len}"
            )
    if cfg.overlong_buffer_len > cfg.generate_max_len:
        problems.append(
            f"overlong_buffer_len={cfg.overlong_buffer_len} is longer than generate_max_len="
            f"{cfg.generate_max_len}: it must be <= generate_max_len (DAPO used 4096 of 20480)"
        )
    return problems


def _divisors_near(total: int, size: int, count: int = 3) -> str:
    divisors = [d for d in range(1, total + 1) if total % d == 0]
    nearest = sorted(divisors, key=lambda d: (abs(d - size), d))[:count]
    return ", ".join(str(d) for d in sorted(nearest))

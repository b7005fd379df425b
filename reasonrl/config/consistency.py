"""Cross-field rules of a config: the algorithm's settings together (critic settings without a critic included),
batch divisibility and sequence lengths."""

from __future__ import annotations

from typing import TYPE_CHECKING

from reasonrl.config.debug import shrink_for_debug
from reasonrl.config.names import ADVANTAGE_ESTIMATOR_NAMES, GROUP_ESTIMATORS, PARTIAL_ROLLOUT_MODES
from reasonrl.config.probes import _model_max_positions

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig

# Fields only the critic / GAE read: with a critic-free estimator they do nothing.
CRITIC_ONLY_FIELDS = (
    "critic_pretrain",
    "critic_lr",
    "critic_epochs",
    "critic_train_batch_size",
    "critic_update_steps",
    "value_clip",
    "lam",
)


def _check_algorithm(cfg: BasePPOExpConfig) -> list[str]:
    problems = []
    est, n = cfg.advantage_estimator, cfg.n_samples_per_prompt
    if est in GROUP_ESTIMATORS and n < 2:
        problems.append(
            f"advantage_estimator={est!r} compares the samples of each prompt, so n_samples_per_prompt={n} "
            "gives every sample advantage 0: set n_samples_per_prompt >= 2 (typically 8-64), or use gae"
        )
    if cfg.dynamic_sampling and n < 2:
        problems.append(
            f"dynamic_sampling drops prompt groups with equal rewards, so n_samples_per_prompt={n} drops all: "
            "set n_samples_per_prompt >= 2 or dynamic_sampling=false"
        )
    problems += _unused_critic_settings(cfg)
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
        if cfg.ref_num_nodes == 0 and not cfg.reference_in_policy:  # LoRA: the adapter switched off is the reference
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
    if cfg.policy_loss == "reinforce" and cfg.policy_optimizer_steps_per_rollout != 1:
        problems.append(
            "policy_loss='reinforce' has no importance ratio, so it is correct only on-policy: set "
            "policy_epochs=1 and train_batch_size=none, policy_update_steps=none or 1 (one optimizer step over the "
            "whole rollout), or use ppo"
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
    problems += fully_async_problems(cfg)
    problems += agent_fn_problems(cfg)
    if cfg.async_staleness > 0 and not cfg.fully_async and (cfg.dynamic_sampling or cfg.advantage_estimator == "remax"):
        extra = "dynamic_sampling refills" if cfg.dynamic_sampling else "remax's greedy baseline rollouts"
        problems.append(
            f"async_staleness={cfg.async_staleness} with {extra}: those extra generations would run on newer weights "
            "than the step's rollout and draw prompts out of step order; use async_staleness=0 with them"
        )
    if cfg.async_staleness > 1 and not cfg.fully_async:
        problems.append(
            f"async_staleness={cfg.async_staleness}: each vLLM engine is one Ray actor that runs one call at a time, "
            "so it cannot receive new weights while it generates, and every sync waits for the rollouts already "
            "queued on it; more than one step ahead adds staleness without adding overlap (docs/distributed.md, "
            "measured). Use async_staleness=1, or fully_async=true (engines that take weights mid-generation)"
        )
    if cfg.async_staleness > 0 and cfg.colocate_all:
        problems.append(
            f"async_staleness={cfg.async_staleness} with colocate_all=true: the roles and the engines time-share the "
            "devices, so generation cannot overlap training and the loop stays synchronous; set colocate_all=false "
            "(split placement) or async_staleness=0"
        )
    return problems + eval_sampling_problems(cfg) + rollout_correction_problems(cfg)


def fully_async_problems(cfg: BasePPOExpConfig) -> list[str]:
    """What fully asynchronous RL (``fully_async``, docs/async.md) needs, and what it does not support yet."""
    if not cfg.fully_async:
        return []
    problems = []
    if cfg.partial_rollout not in PARTIAL_ROLLOUT_MODES:
        problems.append(f"partial_rollout={cfg.partial_rollout!r}: must be one of {list(PARTIAL_ROLLOUT_MODES)}")
    if cfg.async_staleness < 1:
        problems.append(
            "fully_async=true needs async_staleness >= 1 (the largest number of updates between the weights of a "
            "sample's oldest token and the trained ones); set async_staleness=2, say"
        )
    if cfg.colocate_all:
        problems.append(
            "fully_async=true with colocate_all=true: the engines and the trainers time-share the devices, so the "
            "loop stays synchronous; set colocate_all=false (split placement)"
        )
    if cfg.rollout_correction == "off":
        problems.append(
            "fully_async=true needs the engines' per-token log-probs (the behaviour policy of decoupled PPO, "
            "docs/algorithms.md): set rollout_correction=token_tis"
        )
    # (a vision-language model is refused where the model is known: reasonrl.run.vision_check)
    unsupported = {
        "env_fn": (cfg.env_fn is not None, "multi-turn episodes use the engines' turn pump, not the flow"),
        "agent_fn": (cfg.agent_fn is not None, "agent sessions use the engines' turn pump, not the flow"),
        "advantage_estimator=remax": (
            cfg.advantage_estimator == "remax",
            "its greedy baseline rollouts would run outside the flow, on other weights",
        ),
        "lora_sync=adapter": (
            cfg.use_lora and cfg.lora_sync == "adapter",
            "an adapter sync would remove the adapter that requests in flight still use; use lora_sync=merged",
        ),
    }
    for name, (present, why) in unsupported.items():
        if present:
            problems.append(f"fully_async=true does not support {name} yet ({why}); set fully_async=false")
    return problems


def agent_fn_problems(cfg: BasePPOExpConfig) -> list[str]:
    """What ``agent_fn`` (docs/agents.md) cannot be combined with, and why (fully_async is refused with the flow's
    other limits, a vision-language model where the model is known: ``reasonrl.run.vision_check``)."""
    if cfg.agent_fn is None:
        return []
    problems = []
    if cfg.env_fn is not None:
        problems.append(
            f"agent_fn={cfg.agent_fn!r} and env_fn={cfg.env_fn!r} both set: a sample is either an agent program's "
            "session or an environment's episode; set one of them to none"
        )
    if cfg.advantage_estimator == "remax":
        problems.append(
            "agent_fn with advantage_estimator='remax': its greedy baseline would run every agent program a second "
            "time per prompt (its tools and side effects twice, on a trajectory that is never trained); use grpo, "
            "rloo or gae"
        )
    if cfg.check_retokenize:
        problems.append(
            "check_retokenize=true compares env_fn episodes with a one-piece render; with agent_fn the gateway keeps "
            "the engine's tokens and forks instead of re-rendering (docs/agents.md): set check_retokenize=false"
        )
    return problems


def rollout_correction_problems(cfg: BasePPOExpConfig) -> list[str]:
    """The correction compares the engines' log-probs of the sampled tokens with the trainer's log-softmax at
    ``temperature``. With top-p / top-k the engines' distribution is renormalised over the kept tokens, the
    trainer's is not: every token would look off-policy."""
    if cfg.rollout_correction == "off" or (cfg.top_p >= 1.0 and cfg.top_k in (0, -1)):
        return []
    return [
        f"rollout_correction={cfg.rollout_correction!r} with top_p={cfg.top_p}, top_k={cfg.top_k}: the engines' "
        "log-probs are renormalised over the top-p/top-k tokens and the trainer's are not, so every token would "
        "look off-policy; set top_p=1.0 and top_k=0, or rollout_correction=off"
    ]


def eval_sampling_problems(cfg: BasePPOExpConfig) -> list[str]:
    """Eval settings that cannot mean what they say (training and ``python -m reasonrl.eval`` both check them)."""
    if cfg.eval_n_samples > 1 and cfg.eval_temperature == 0:
        return [
            f"eval_n_samples={cfg.eval_n_samples} with eval_temperature=0 (greedy) gives {cfg.eval_n_samples} "
            "identical samples: set eval_temperature > 0 (e.g. 0.6 or 1.0), or eval_n_samples=1"
        ]
    return []


def _unused_critic_settings(cfg: BasePPOExpConfig) -> list[str]:
    """Critic settings (:data:`CRITIC_ONLY_FIELDS`) given to a run whose estimator trains no critic would be
    silently ignored: refused when set on top of the recipe (command line, ``with_overrides``, constructor
    arguments), i.e. when the value differs from the recipe class's own default (after the ``DEBUG_MODE`` shrink in
    a debug run). Values the recipe class itself declares or inherits (a GRPO recipe derived from a PPO recipe
    keeps its parent's ``critic_lr``) are the author's, not a mistake of this run, and pass."""
    est = cfg.advantage_estimator
    if cfg.use_critic or est not in ADVANTAGE_ESTIMATOR_NAMES:
        return []
    try:
        recipe = type(cfg)()
        defaults = [recipe, shrink_for_debug(recipe)] if cfg.debug else [recipe]
    except Exception:  # noqa: BLE001 - a recipe that needs arguments: its defaults are unknown, nothing to compare
        return []
    changed = [name for name in CRITIC_ONLY_FIELDS if all(getattr(cfg, name) != getattr(d, name) for d in defaults)]
    if not changed:
        return []
    given = ", ".join(f"{name}={getattr(cfg, name)!r}" for name in changed)
    return [
        f"{given}: only advantage_estimator='gae' trains a critic, so with {est!r} "
        f"{'this setting' if len(changed) == 1 else 'these settings'} would be silently ignored: remove "
        f"{'it' if len(changed) == 1 else 'them'}, or use advantage_estimator=gae with critic_num_nodes >= 1 "
        f"(values the recipe {type(cfg).__name__} declares itself are accepted)"
    ]


def _check_batches(cfg: BasePPOExpConfig) -> list[str]:
    problems: list[str] = []
    if cfg.rollout_batch_size < 1 or cfg.n_samples_per_prompt < 1:
        return problems  # reported by _check_ranges
    samples = cfg.rollout_samples_per_step
    what = f"rollout_batch_size {cfg.rollout_batch_size} x n_samples_per_prompt {cfg.n_samples_per_prompt}"
    policy_ok = True
    roles = [("policy", "train_batch_size", "policy_update_steps", cfg.policy_world_size)]
    if cfg.use_critic:
        roles.append(("critic", "critic_train_batch_size", "critic_update_steps", cfg.critic_world_size))
    for role, size_name, steps_name, world in roles:
        size, steps = getattr(cfg, size_name), getattr(cfg, steps_name)
        if size is not None and steps is not None:
            problems.append(
                f"{size_name}={size} and {steps_name}={steps} both set the {role}'s mini-batches: keep one "
                f"({steps_name} is ORZ's way: optimizer steps per pass; {size_name}: samples per step)"
            )
            policy_ok = policy_ok and role != "policy"
            continue
        if steps is not None:
            if steps >= 1 and world >= 1 and samples < steps * world:
                problems.append(
                    f"{steps_name}={steps} cuts the {samples} rollout samples per step ({what}) into mini-batches "
                    f"smaller than the {role} data-parallel world size {world}: lower {steps_name} to at most "
                    f"{max(samples // max(world, 1), 1)} or sample more per step"
                )
            continue
        inherited = role == "critic" and size is None  # the critic uses the policy's mini-batch
        if inherited and cfg.policy_update_steps is not None:
            continue  # the policy's nearly equal parts, checked above
        if (size is not None and size < 1) or (inherited and not policy_ok):
            continue  # reported by _check_ranges / for the policy
        if size is not None and samples % size:
            problems.append(
                f"{size_name}={size} does not divide the {samples} rollout samples per step ({what}): use a "
                f"divisor of {samples} such as {_divisors_near(samples, size)}, {size_name}=none, or "
                f"{steps_name} (nearly equal parts)"
            )
            policy_ok = policy_ok and role != "policy"
            continue
        mini = cfg.policy_mini_batch_size if role == "policy" else cfg.critic_mini_batch_size
        if world >= 1 and mini % world:
            policy_ok = policy_ok and role != "policy"
            if inherited:
                shown = f"critic_train_batch_size=none (the policy's mini-batch of {mini} samples)"
            elif size is None:
                shown = f"{size_name}=none (the whole rollout, {mini} samples)"
            else:
                shown = f"{size_name}={size}"
            problems.append(
                f"{shown} is not divisible by the {role} data-parallel world size {world} ({role}_num_nodes x "
                f"{role}_devices_per_node), so ranks would get unequal shares: set {size_name} to a multiple of "
                f"{world} that divides {samples} ({what}), or change the {role} sizes"
            )
    if cfg.vllm_num_engines >= 1 and samples % cfg.vllm_num_engines:
        problems.append(
            f"the {samples} rollout samples per step ({what}) do not split evenly over vllm_num_engines="
            f"{cfg.vllm_num_engines}: make rollout_batch_size * n_samples_per_prompt a multiple of "
            f"{cfg.vllm_num_engines}, or change vllm_num_engines"
        )
    return problems


def engine_length_problems(cfg: BasePPOExpConfig) -> list[str]:
    """A prompt plus its response must fit the engines' context (training and evaluation both check it)."""
    total = cfg.max_prompt_len + cfg.generate_max_len
    if cfg.vllm_max_model_len is not None and total > cfg.vllm_max_model_len:
        return [
            f"max_prompt_len {cfg.max_prompt_len} + generate_max_len {cfg.generate_max_len} = {total} tokens do "
            f"not fit vllm_max_model_len={cfg.vllm_max_model_len}: lower generate_max_len or max_prompt_len, or "
            "raise vllm_max_model_len (none = the sum)"
        ]
    return []


def _check_lengths(cfg: BasePPOExpConfig) -> list[str]:
    problems = engine_length_problems(cfg)
    total = cfg.max_prompt_len + cfg.generate_max_len
    fix = "lower generate_max_len or max_prompt_len"
    if total > cfg.max_tokens_per_micro_batch:
        problems.append(
            f"max_tokens_per_micro_batch={cfg.max_tokens_per_micro_batch} cannot hold one full sample "
            f"(max_prompt_len + generate_max_len = {total} tokens): raise it to >= {total}, or {fix}"
        )
    # the distillation teacher reads every sample whole too (its log-probs of the sampled tokens)
    for name in ("pretrain", "critic_pretrain" if cfg.use_critic else None, "teacher_pretrain"):
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


def _check_sync_transport(cfg: BasePPOExpConfig, cluster_resources=None) -> list[str]:
    """``sync_transport=broadcast`` under ``colocate_all`` on GPU is refused: the broadcast group would hold policy
    rank 0 and the engine worker on its GPU as two ranks on one device, which NCCL refuses (duplicate GPU). On CPU
    (gloo) and under split placement broadcast is fine; ``auto`` picks ``ipc`` there."""
    if cfg.sync_transport != "broadcast" or not cfg.colocate_all or cfg.resolved_device(cluster_resources) != "gpu":
        return []
    return [
        "sync_transport=broadcast with colocate_all=true on GPU: the broadcast group would hold policy rank 0 and the "
        "engine worker sharing its GPU as two ranks on one device, which NCCL refuses (duplicate GPU); set "
        "sync_transport=auto or ipc (CUDA IPC between the processes sharing each GPU), or colocate_all=false"
    ]


def _check_colocation(cfg: BasePPOExpConfig, cluster_resources=None) -> list[str]:
    """``colocate_all`` on GPU: vLLM must sleep (its KV cache would otherwise hold the devices while DeepSpeed
    trains), and ``vllm_gpu_memory_utilization`` must leave room, on an 80 GB device, for what stays resident while
    vLLM is awake (every role's ZeRO parameter partition; :mod:`reasonrl.planning.memory_model`). Models the
    memory model has no shape for are not checked. On CPU neither applies (sleep is a no-op there)."""
    if not cfg.colocate_all or cfg.resolved_device(cluster_resources) != "gpu":
        return []
    from reasonrl.config.memory import setup_from_config
    from reasonrl.planning import memory_model

    problems = []
    if not cfg.vllm_enable_sleep:
        problems.append(
            "colocate_all=true with vllm_enable_sleep=false on GPU: vLLM would keep its weights and KV cache "
            f"({cfg.vllm_gpu_memory_utilization:.0%} of each device) while DeepSpeed trains on the same devices; set "
            "vllm_enable_sleep=true, or colocate_all=false (vLLM on its own devices)"
        )
    try:
        setup = setup_from_config(cfg)
    except KeyError:
        return problems
    limit = memory_model.max_colocated_utilization(setup)
    if cfg.vllm_gpu_memory_utilization > limit:
        problems.append(
            f"vllm_gpu_memory_utilization={cfg.vllm_gpu_memory_utilization} under colocate_all leaves too little of an "
            f"80 GB device for the roles' parameter partitions that stay resident while vLLM generates (memory "
            f"model, docs/memory.md): set vllm_gpu_memory_utilization <= {limit:.2f}"
        )
    return problems

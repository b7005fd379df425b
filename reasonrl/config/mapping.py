"""What the trainer builds from a config: placement resources and colocation flags (the pure planner's dataclasses),
each role's model source, and the policy-loss, value-loss and reward configs. The ``BasePPOExpConfig`` methods of the
same names delegate here; the heavy modules are imported inside the functions. Each DeepSpeed role's
``WorkerConfig`` is built where the roles start: :func:`reasonrl.run.role_settings.worker_config`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def role_resources(cfg: BasePPOExpConfig) -> dict[str, Any]:
    """See :meth:`BasePPOExpConfig.role_resources`."""
    from reasonrl.planning.placement_layout import RoleResources, VLLMResources

    def role(on: bool, nodes: int, per_node: int) -> RoleResources:
        return RoleResources(nodes if on else 0, per_node)

    return {
        "policy": RoleResources(cfg.policy_num_nodes, cfg.policy_devices_per_node),
        "ref": role(cfg.use_reference and not cfg.reference_in_policy, cfg.ref_num_nodes, cfg.ref_devices_per_node),
        # the distillation teacher is placed exactly as the reference: its shape, its colocation
        "teacher": role(cfg.use_teacher, cfg.ref_num_nodes, cfg.ref_devices_per_node),
        "critic": role(cfg.use_critic, cfg.critic_num_nodes, cfg.critic_devices_per_node),
        "reward": role(cfg.use_reward_model, cfg.reward_num_nodes, cfg.reward_devices_per_node),
        "vllm": VLLMResources(cfg.vllm_num_engines, cfg.vllm_tensor_parallel_size),
    }


def placement_kwargs(cfg: BasePPOExpConfig) -> dict[str, Any]:
    """See :meth:`BasePPOExpConfig.placement_kwargs`."""
    return dict(
        colocate_all=cfg.colocate_all,
        colocate_policy_ref=cfg.colocate_policy_ref,
        colocate_critic_reward=cfg.colocate_critic_reward,
        cpus_per_bundle=cfg.cpus_per_bundle,
    )


def placement_requests(cfg: BasePPOExpConfig, device: str | None = None) -> list:
    """See :meth:`BasePPOExpConfig.placement_requests`."""
    from reasonrl.planning.placement_layout import plan_groups

    return plan_groups(cfg.role_resources(), device=device or cfg.resolved_device(), **cfg.placement_kwargs())


def role_model(cfg: BasePPOExpConfig, role: str) -> str | None:
    """The model field value a role loads: ``pretrain`` for policy, ref and the vLLM engines, ``critic_pretrain``
    (else ``pretrain``) for the critic, ``reward_pretrain`` for the reward model, ``teacher_pretrain`` for the
    distillation teacher."""
    if role == "critic":
        return cfg.critic_pretrain or cfg.pretrain
    if role == "teacher":
        return cfg.teacher_pretrain
    return cfg.reward_pretrain if role == "reward" else cfg.pretrain


def role_model_source(cfg: BasePPOExpConfig, role: str) -> str | None:
    """What the actors of ``role`` get to load (:meth:`BasePPOExpConfig.model_source` of :func:`role_model`): a
    Hub id pinned to its commit, resolved by each actor on its own node, or a local folder."""
    return cfg.model_source(role_model(cfg, role))


def role_model_sources(cfg: BasePPOExpConfig, roles) -> dict[str, str]:
    """``{role: model source}`` of ``roles`` (e.g. the roles of a placement plan) that load a model."""
    out = {role: role_model_source(cfg, role) for role in roles}
    return {role: source for role, source in out.items() if source is not None}


def policy_loss_config(cfg: BasePPOExpConfig):
    """See :meth:`BasePPOExpConfig.policy_loss_config`."""
    from reasonrl.algos.loss_settings import PolicyLossConfig

    return PolicyLossConfig(
        loss=cfg.policy_loss,
        clip_low=cfg.clip_eps_low,
        clip_high=cfg.clip_eps_high,
        dual_clip_c=cfg.dual_clip_c,
        agg_mode=cfg.agg_mode,
        norm_constant=cfg.resolved_loss_norm_constant,
        kl_estimator=cfg.kl_estimator,
        temperature=cfg.temperature,
        reuse_current_logprobs=cfg.reuses_current_logprobs,
        rollout_correction=cfg.rollout_correction,
        rollout_correction_cap=cfg.rollout_correction_cap,
        rollout_correction_lower=cfg.rollout_correction_lower,
        rollout_correction_upper=cfg.rollout_correction_upper,
    )


def value_loss_config(cfg: BasePPOExpConfig):
    """See :meth:`BasePPOExpConfig.value_loss_config`."""
    from reasonrl.algos.loss_settings import ValueLossConfig

    return ValueLossConfig(
        clip_eps=cfg.value_clip, agg_mode=cfg.agg_mode, norm_constant=cfg.resolved_loss_norm_constant
    )


def reward_config(cfg: BasePPOExpConfig):
    """See :meth:`BasePPOExpConfig.reward_config`."""
    from reasonrl.rewards.shaping import RewardConfig

    return RewardConfig(
        correct_reward=cfg.correct_reward,
        wrong_reward=cfg.wrong_reward,
        require_stop=cfg.require_stop,
        extract_mode=cfg.extract_mode,
        format_reward=cfg.format_reward,
        overlong_buffer_len=cfg.overlong_buffer_len,
        overlong_penalty_factor=cfg.overlong_penalty_factor,
        max_response_length=cfg.generate_max_len,
    )


def code_reward_config(cfg: BasePPOExpConfig):
    """See :meth:`BasePPOExpConfig.code_reward_config`."""
    from reasonrl.rewards.code import CodeRewardConfig

    return CodeRewardConfig(
        reward=cfg.code_reward,
        test_timeout_s=cfg.code_test_timeout_s,
        max_timeout_s=cfg.code_max_timeout_s,
        batch_timeout_s=cfg.code_batch_timeout_s,
        memory_mb=cfg.code_memory_mb,
        isolate=cfg.code_isolate,
        workers=cfg.code_workers,
    )

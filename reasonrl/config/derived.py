"""Values derived from the fields of :class:`reasonrl.config.BasePPOExpConfig`: batch arithmetic (mini-batch
bounds, optimizer steps per rollout), which roles run, resolved defaults (context length, loss constant, sync
tolerance, device, attention kernel). A mixin: it has no fields of its own and reads the config's."""

from __future__ import annotations

from collections.abc import Mapping

from reasonrl.config.probes import _gpu_count
from reasonrl.utils.even_split import even_bounds


class DerivedValues:
    """Properties and helpers computed from a config's fields (``BasePPOExpConfig`` inherits them)."""

    @property
    def rollout_samples_per_step(self) -> int:
        """Responses generated per step: rollout_batch_size * n_samples_per_prompt."""
        return self.rollout_batch_size * self.n_samples_per_prompt

    @property
    def policy_world_size(self) -> int:
        return self.policy_num_nodes * self.policy_devices_per_node

    @property
    def critic_world_size(self) -> int:
        return self.critic_num_nodes * self.critic_devices_per_node

    @property
    def use_critic(self) -> bool:
        """True iff the advantage estimator needs values (``gae``); otherwise the critic role is disabled."""
        return self.advantage_estimator == "gae"

    @property
    def use_reference(self) -> bool:
        """True iff a reference model is needed (any ``kl_mode`` but ``none``)."""
        return self.kl_mode != "none"

    @property
    def use_teacher(self) -> bool:
        """True iff a distillation teacher runs (``teacher_pretrain`` set): a frozen role placed as the reference."""
        return self.teacher_pretrain is not None

    @property
    def use_lora(self) -> bool:
        """True iff the policy trains LoRA adapters (``lora_rank > 0``) instead of every weight."""
        return self.lora_rank > 0

    @property
    def is_vision_model(self) -> bool:
        """True iff ``pretrain`` is a vision-language model: its folder's ``config.json`` has a ``vision_config``
        (resolves the model: call it once the model is known to load)."""
        import json
        from pathlib import Path

        path = self.resolve_model_path(self.pretrain)
        config = Path(path) / "config.json" if path else None
        return bool(config and config.is_file() and "vision_config" in json.loads(config.read_text()))

    @property
    def reference_fused(self) -> bool:
        """True iff each policy rank holds a frozen copy of ``pretrain`` as the reference (``reference_process``
        resolved: :func:`reasonrl.config.reference_process.reference_fused`)."""
        from reasonrl.config.reference_process import reference_fused

        return reference_fused(self)

    @property
    def reference_in_policy(self) -> bool:
        """True iff the reference log-probs come from the policy workers: with the adapter switched off (LoRA), or
        from the frozen copy each policy rank holds (:attr:`reference_fused`). No reference role is placed."""
        return self.use_reference and (self.use_lora or self.reference_fused)

    @property
    def sync_trainable_only(self) -> bool:
        """True iff syncs after the first send only the parameters that train: a frozen vision tower without LoRA
        (LoRA's merged sync sends base weights)."""
        return self.freeze_vision_tower and not self.use_lora

    @property
    def engine_sleep_level(self) -> int:
        """vLLM sleep level under ``colocate_all``: 2 (weights discarded, every sync sends them all) unless each sync
        sends a LoRA adapter only (``lora_sync=adapter``) or the trainable parameters only (a frozen vision
        tower), which need the other weights kept (level 1)."""
        keep = (self.use_lora and self.lora_sync == "adapter") or self.sync_trainable_only
        return 1 if keep else 2  # phases.ADAPTER_SYNC_SLEEP_LEVEL, SLEEP_LEVEL

    @property
    def use_reward_model(self) -> bool:
        return self.reward_num_nodes > 0

    def mini_batch_bounds(self, role: str) -> list[tuple[int, int]]:
        """``[(lo, hi), ...]``: the sample ranges of one pass over the rollout, one per optimizer step of ``role``
        (``policy`` or ``critic``). ``*_update_steps`` cuts the rollout into that many nearly equal parts (ORZ);
        otherwise parts of ``*_train_batch_size`` samples (the critic falls back to the policy's choice)."""
        n = self.rollout_samples_per_step
        steps, size = self.policy_update_steps, self.train_batch_size
        if role == "critic" and (self.critic_update_steps or self.critic_train_batch_size):
            steps, size = self.critic_update_steps, self.critic_train_batch_size
        if steps:
            steps = min(steps, n)
            bounds = even_bounds(n, steps)
            return list(zip(bounds, bounds[1:], strict=False))
        size = size or n
        return [(lo, min(lo + size, n)) for lo in range(0, n, size)]

    @property
    def policy_mini_batch_size(self) -> int:
        """Samples in the policy's largest mini-batch (one optimizer step)."""
        return max(hi - lo for lo, hi in self.mini_batch_bounds("policy"))

    @property
    def critic_mini_batch_size(self) -> int:
        """Samples in the critic's largest mini-batch."""
        return max(hi - lo for lo, hi in self.mini_batch_bounds("critic"))

    @property
    def policy_optimizer_steps_per_rollout(self) -> int:
        return self.policy_epochs * len(self.mini_batch_bounds("policy"))

    @property
    def reuses_current_logprobs(self) -> bool:
        """True when the old-policy log-probs equal the current policy's at update time, so the old-log-prob
        forward is skipped and the update uses its own log-probs, detached (verl's on-policy shortcut): ONE policy
        optimizer step per rollout (nothing changes the weights between that forward and the update) and no KL in
        the reward or distillation reward (which need the old log-probs before the update)."""
        return self.policy_optimizer_steps_per_rollout == 1 and self.kl_mode != "reward" and not self.use_teacher

    @property
    def critic_optimizer_steps_per_rollout(self) -> int:
        return self.critic_epochs * len(self.mini_batch_bounds("critic"))

    @property
    def resolved_vllm_max_model_len(self) -> int:
        return self.vllm_max_model_len or self.max_prompt_len + self.generate_max_len

    @property
    def resolved_loss_norm_constant(self) -> float | None:
        """``loss_norm_constant``, or ``generate_max_len`` for ``seq-mean-token-sum-norm`` when it is None."""
        if self.loss_norm_constant is not None:
            return self.loss_norm_constant
        return float(self.generate_max_len) if self.agg_mode == "seq-mean-token-sum-norm" else None

    @property
    def resolved_sync_verify_tolerance(self) -> float:
        if self.sync_verify_tolerance is not None:
            return self.sync_verify_tolerance
        return 0.1 if self.bf16 else 1e-4

    def resolved_device(self, cluster_resources: Mapping[str, float] | None = None) -> str:
        """``"gpu"`` or ``"cpu"``. ``auto`` with ``cluster_resources`` (``ray.cluster_resources()``, after
        ``ray.init``): ``gpu`` when the cluster has GPUs, whatever the driver sees (a GPU-less head node drives GPU
        workers); without them (before Ray starts) it asks torch (imported here, lazily) about this machine."""
        if self.device != "auto":
            return self.device
        if cluster_resources is not None:
            return "gpu" if cluster_resources.get("GPU", 0) > 0 else "cpu"
        return "gpu" if _gpu_count() > 0 else "cpu"

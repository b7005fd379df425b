"""The losses' settings: what the policy and value updates read, built once per run from the experiment config
(``BasePPOExpConfig.policy_loss_config()`` / ``value_loss_config()``) and sent unchanged with every update.

What changes from step to step is not here: the KL loss coefficient (the KL controller's current value, fixed or
adaptive) and the entropy bonus (the adaptive entropy controller's, or the config's fixed ``entropy_coef``) travel
with each update as :class:`PolicyStepCoefs`, so each has exactly one source (the driver's controllers). See
docs/algorithms.md for every name.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PolicyLossConfig:
    """Policy-update settings of a run."""

    loss: str = "ppo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float | None = None
    agg_mode: str = "token-mean"
    norm_constant: float | None = None
    kl_estimator: str = "k3"  # the KL loss's estimator; its coefficient is PolicyStepCoefs.kl_loss_coef
    temperature: float = 1.0
    # The old policy is the current one (one optimizer step per rollout): take the update's own log-probs,
    # detached, as the PPO ratio's denominator instead of a separate forward (the ratio is exactly 1).
    reuse_current_logprobs: bool = False
    # Rollout-policy correction (reasonrl.algos.rollout_correction) against the engine's log-probs of the sampled
    # tokens: "off", "monitor" (metrics only, weight 1), or a mode of ROLLOUT_CORRECTION_MODES other than "none".
    rollout_correction: str = "off"
    rollout_correction_cap: float = 2.0
    rollout_correction_lower: float | None = None
    rollout_correction_upper: float | None = None


@dataclasses.dataclass(frozen=True)
class PolicyStepCoefs:
    """The policy loss's coefficients of one step: ``loss + kl_loss_coef * KL - entropy_coef * entropy``.

    ``kl_loss_coef``: the KL controller's value under ``kl_mode='loss'``, else 0 (the KL then shapes the reward or
    is off); ``entropy_coef``: the adaptive entropy controller's effective coefficient, else the config's fixed
    ``entropy_coef``. Zero: the term is not computed."""

    kl_loss_coef: float = 0.0
    entropy_coef: float = 0.0


@dataclasses.dataclass(frozen=True)
class ValueLossConfig:
    """Value-update settings of a run (the clipped value loss, aggregated like the policy's)."""

    clip_eps: float | None = 0.2
    agg_mode: str = "token-mean"
    norm_constant: float | None = None

"""KL regularisation: per-token estimators, KL folded into rewards or used as a loss, and KL controllers.

Per-token estimators of KL(pi_theta || pi_ref) from samples a_t ~ pi_theta (Schulman, "Approximating KL
Divergence", http://joschu.net/blog/kl-approx.html), with d = logp - ref_logp::

    k1   d                               unbiased, can be negative, high variance        (alias "kl")
    k2   0.5 * d^2                        biased, non-negative, low variance             (alias "mse")
    k3   exp(-d) - 1 + d                  unbiased, non-negative, low variance           (alias "low_var_kl")
    abs  |d|

k3 is computed as verl does: with x = clamp(-d, -20, 20), k3 = clamp(exp(x) - x - 1, -10, 10). The clamps
bound the value (and zero the gradient) for tokens where the policy moved very far from the reference.

Straight-through variants: any name with a trailing "+" (e.g. "k3+", verl's convention) returns the VALUE of
the base estimator with the GRADIENT of k2, i.e. d/d logp = logp - ref_logp. As a loss term, k2's gradient is
an unbiased estimate of the gradient of the reverse KL (k1's and k3's sampled gradients are not)::

    kl_plus = k2 - sg[k2] + sg[base]
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reasonrl.algos.aggregation import aggregate_loss
from reasonrl.algos.utils import masked_mean, outcome_to_token_rewards

K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0


def kl_k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k1 = logp - ref_logp  [batch, seq]."""
    return logprobs - ref_logprobs


def kl_k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k2 = 0.5 * (logp - ref_logp)^2  [batch, seq]."""
    return 0.5 * (logprobs - ref_logprobs).square()


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """k3 = exp(x) - x - 1 with x = clamp(ref_logp - logp, -20, 20), clamped to [-10, 10]  [batch, seq]."""
    x = (ref_logprobs - logprobs).clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    return (x.exp() - x - 1.0).clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)


def kl_abs(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """abs = |logp - ref_logp|  [batch, seq]."""
    return (logprobs - ref_logprobs).abs()


KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Base estimators; every name also exists with a trailing "+" (straight-through, k2 gradient), see kl_penalty.
KL_ESTIMATORS: dict[str, KLEstimator] = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
    "abs": kl_abs,
    "kl": kl_k1,  # verl / OpenRLHF alias
    "mse": kl_k2,  # verl alias
    "low_var_kl": kl_k3,  # verl alias
}


def kl_estimator_names() -> list[str]:
    """Every accepted estimator name, including the straight-through '+' variants."""
    return sorted(KL_ESTIMATORS) + sorted(f"{name}+" for name in KL_ESTIMATORS)


def kl_penalty(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    estimator: str = "k3",
    action_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate [batch, seq] of KL(pi_theta || pi_ref) (see the module docstring).

    Args:
        logprobs: [batch, seq] log pi_theta of the sampled tokens (may carry grad).
        ref_logprobs: [batch, seq] log pi_ref of the same tokens (treated as a constant).
        estimator: a name of ``KL_ESTIMATORS``, optionally with a trailing "+" (straight-through k2 gradient).
        action_mask: optional [batch, seq]; masked positions are set to 0.
    """
    straight_through = estimator.endswith("+")
    base = estimator[:-1] if straight_through else estimator
    if base not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; valid names: {kl_estimator_names()}")
    ref_logprobs = ref_logprobs.detach()
    kl = KL_ESTIMATORS[base](logprobs, ref_logprobs)
    if straight_through:
        k2 = kl_k2(logprobs, ref_logprobs)
        kl = k2 - k2.detach() + kl.detach()
    if action_mask is not None:
        kl = torch.where(action_mask.bool(), kl, torch.zeros_like(kl))
    return kl


def kl_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    estimator: str = "k3",
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL as a loss term (GRPO, DeepSeekMath arXiv:2402.03300): agg(kl_penalty(logp, ref_logp)).

    The trainer adds ``coef * loss`` to the policy loss. Returns (scalar, {"kl": local masked mean}).
    """
    kl = kl_penalty(logprobs, ref_logprobs, estimator)  # [batch, seq]
    mask = action_mask.bool()
    loss = aggregate_loss(kl, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)
    return loss, {"kl": masked_mean(kl.detach().float(), mask)}


@torch.no_grad()
def kl_shaped_token_rewards(
    outcome_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    kl: torch.Tensor,
    kl_coef: float,
) -> torch.Tensor:
    """KL folded into the rewards (InstructGPT/PPO-RLHF style, Ziegler et al. 2019, arXiv:1909.08593).

        r_t = outcome_i * [t = last valid token of i] - kl_coef * kl_t       on valid tokens, 0 elsewhere

    Args:
        outcome_rewards: [batch] scalar reward per sample.
        action_mask: [batch, seq].
        kl: [batch, seq] per-token KL, e.g. ``kl_penalty(old_logprobs, ref_logprobs, "k1")``.
        kl_coef: beta (``controller.value``).
    Returns: token rewards [batch, seq] float32 for the advantage estimators.
    """
    mask = action_mask.bool()
    rewards = outcome_to_token_rewards(outcome_rewards, mask) - kl_coef * kl.detach().float()
    return torch.where(mask, rewards, torch.zeros_like(rewards))


class FixedKLController:
    """Constant KL coefficient: ``value`` never changes; ``update`` is a no-op (verl/OpenRLHF ``FixedKLController``)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Does nothing (kept so both controllers are interchangeable)."""


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences").

    After each rollout with measured KL ``current_kl`` over ``n_steps`` samples::

        e     = clip(current_kl / target_kl - 1, -0.2, 0.2)
        value = value * (1 + e * n_steps / horizon)

    The coefficient grows when the KL is above target and shrinks when below.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if target_kl <= 0 or horizon <= 0:
            raise ValueError(f"target_kl and horizon must be > 0, got {target_kl}, {horizon}")
        self.value = float(init_kl_coef)
        self.target_kl = float(target_kl)
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(float(current_kl) / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon


def get_kl_controller(
    kind: str, kl_coef: float, target_kl: float | None = None, horizon: int | None = None
) -> FixedKLController | AdaptiveKLController:
    """``kind='fixed'`` -> FixedKLController(kl_coef); ``kind='adaptive'`` -> AdaptiveKLController(kl_coef,
    target_kl, horizon) (both required). ``ValueError`` for anything else."""
    if kind == "fixed":
        return FixedKLController(kl_coef)
    if kind == "adaptive":
        if target_kl is None or horizon is None:
            raise ValueError("the adaptive KL controller needs target_kl and horizon")
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown KL controller {kind!r}; valid names: ['adaptive', 'fixed']")

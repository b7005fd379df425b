"""Policy-gradient losses (chosen by name from ``POLICY_LOSSES``) and the clipped value loss.

Every policy loss has the same signature so the trainer can call any of them by name::

    loss, metrics = fn(
        logprobs,          # [batch, seq] log pi_theta(a_t | s_t), with grad
        old_logprobs,      # [batch, seq] log pi_old(a_t | s_t) of the rollout policy (no grad; reinforce may pass None)
        advantages,        # [batch, seq]
        action_mask,       # [batch, seq]
        clip_low=0.2, clip_high=0.2,   # eps_low / eps_high (clip-higher, DAPO arXiv:2503.14476)
        dual_clip_c=None,              # constant c > 1 of dual-clip PPO (ppo only; None = off)
        agg_mode="token-mean", global_num_tokens=None, global_num_seqs=None, norm_constant=None,
        token_weights=None,            # [batch, seq] detached loss multipliers (rollout correction); None = 1
    )

The per-token loss matrix is reduced with ``aggregate_loss`` (see ``aggregation.py``). Hyper-parameters a loss
does not use are ignored. ``old_logprobs`` and ``advantages`` are treated as constants (detached).

The log-ratio log(pi / pi_old) is clamped to [-20, 20] before exp (as verl) to avoid overflow.

Metrics are detached 0-dim tensors, masked means over the LOCAL valid tokens (log them averaged over
micro-batches): ``clipfrac`` (tokens whose gradient is cut by the clip), ``clipfrac_low`` / ``clipfrac_high``
(the low / high side of it), ``dual_clipfrac`` (ppo with dual-clip), ``approx_kl`` (k3 estimate of
KL(pi_old || pi_theta) = mean((r - 1) - log r), r = pi / pi_old; non-negative, low variance), ``ratio_mean``,
``ratio_min``, ``ratio_max``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reasonrl.algos.aggregation import aggregate_loss
from reasonrl.algos.utils import masked_mean

LOG_RATIO_CLAMP = 20.0
GSPO_LOG_RATIO_MAX = 10.0


def _ratio_metrics(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """approx_kl (k3 of KL(pi_old || pi)) and ratio stats over valid tokens; all detached."""
    with torch.no_grad():
        log_ratio = log_ratio.detach().float()
        ratio = log_ratio.exp()
        any_valid = mask.any()  # no host sync: an empty mask gives 0 through torch.where
        big = torch.full_like(ratio, float("inf"))
        zero = ratio.new_zeros(())
        return {
            "approx_kl": masked_mean(ratio - 1.0 - log_ratio, mask),
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_min": torch.where(any_valid, torch.where(mask, ratio, big).min(), zero),
            "ratio_max": torch.where(any_valid, torch.where(mask, ratio, -big).max(), zero),
        }


def _check_shapes(mask: torch.Tensor, **tensors: torch.Tensor | None) -> torch.Tensor:
    if mask.dim() != 2:
        raise ValueError(f"action_mask must be [batch, seq], got shape {tuple(mask.shape)}")
    for name, t in tensors.items():
        if t is not None and t.shape != mask.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != action_mask {tuple(mask.shape)}")
    return mask.bool()


def _weighted(loss_mat: torch.Tensor, token_weights: torch.Tensor | None) -> torch.Tensor:
    """``loss_mat * token_weights`` per token (detached weights, e.g. rollout-policy correction:
    :mod:`reasonrl.algos.rollout_correction`); ``None`` = weight 1. The aggregation still counts every token of
    the action mask, so a token of weight 0 adds 0 to the numerator and 1 to the token count (as TRL does)."""
    if token_weights is None:
        return loss_mat
    if token_weights.shape != loss_mat.shape:
        raise ValueError(f"token_weights {tuple(token_weights.shape)} != loss {tuple(loss_mat.shape)} [batch, seq]")
    return loss_mat * token_weights.detach().to(loss_mat)


def ppo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347) with clip-higher and optional dual-clip.

    Per token, with r = exp(logp - old_logp) and A the advantage::

        L_clip = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))          (eps_low != eps_high: DAPO clip-higher)
        L      = min(L_clip, -c A)  if A < 0 and dual_clip_c = c           (dual-clip, Ye et al. 2020, arXiv:1912.09729)
        L      = L_clip             otherwise

    Dual-clip bounds the loss of a negative-advantage token whose ratio has exploded (r > c). c must be > 1.
    This is verl's ``vanilla`` policy loss (verl enables dual-clip c=3 by default; here it is opt-in).
    Shapes: all inputs [batch, seq]. Returns (scalar loss, metrics).
    """
    mask = _check_shapes(action_mask, logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    adv = advantages.detach()
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [batch, seq]
    ratio = log_ratio.exp()
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)  # [batch, seq]
    dual_active = torch.zeros_like(mask)
    if dual_clip_c is not None:
        loss_dual = -adv * dual_clip_c
        dual_active = (adv < 0) & (loss_dual < loss_mat)
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, loss_dual), loss_mat)
    loss_mat = _weighted(loss_mat, token_weights)
    loss = aggregate_loss(loss_mat, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)

    with torch.no_grad():
        r = ratio.detach()
        high = (adv > 0) & (r > 1.0 + clip_high)  # gradient cut on the upper side
        low = (adv < 0) & (r < 1.0 - clip_low)  # gradient cut on the lower side
        metrics = {
            "clipfrac": masked_mean((high | low).float(), mask),
            "clipfrac_low": masked_mean(low.float(), mask),
            "clipfrac_high": masked_mean(high.float(), mask),
            "dual_clipfrac": masked_mean(dual_active.float(), mask),
            **_ratio_metrics(log_ratio, mask),
        }
    return loss, metrics


def gspo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GSPO, Group Sequence Policy Optimization (Zheng et al. 2025, arXiv:2507.18071), token-level form.

    Sequence ratio (length-normalised):  s_i = exp( (1/|y_i|) sum_t (logp_{i,t} - old_logp_{i,t}) ).
    Token form ("GSPO-token"):           s_{i,t} = sg[s_i] * pi_{i,t} / sg[pi_{i,t}]
                                                 = exp(sg[log s_i] + logp_{i,t} - sg[logp_{i,t}])
    Loss per token:                      max(-A_{i,t} s_{i,t}, -A_{i,t} clip(s_{i,t}, 1 - eps_low, 1 + eps_high))

    s_{i,t} equals s_i in value, and d s_{i,t} / d logp_{i,t} = s_i. With a per-sequence advantage and
    ``agg_mode='seq-mean-token-mean'`` (the paper's objective) the gradient equals that of the sequence-level
    objective -(1/G) sum_i min(s_i A_i, clip(s_i) A_i). log s_i is clamped at 10 (as verl). The paper uses very
    small clip ranges (eps_low=3e-4, eps_high=4e-4). ``dual_clip_c`` is ignored. Unlike verl, the agg_mode
    you pass is used as is (verl forces seq-mean-token-mean).
    """
    mask = _check_shapes(action_mask, logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    adv = advantages.detach()
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [batch, seq]
    seq_log_ratio = masked_mean(log_ratio, mask, dim=-1)  # [batch]  log s_i
    token_log_ratio = seq_log_ratio.detach()[:, None] + logprobs - logprobs.detach()  # [batch, seq]
    seq_ratio = token_log_ratio.clamp(max=GSPO_LOG_RATIO_MAX).exp()  # [batch, seq], value s_i
    loss_unclipped = -adv * seq_ratio
    loss_clipped = -adv * seq_ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_mat = torch.maximum(loss_unclipped, loss_clipped)
    loss_mat = _weighted(loss_mat, token_weights)
    loss = aggregate_loss(loss_mat, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)

    with torch.no_grad():
        s = seq_ratio.detach()
        high = (adv > 0) & (s > 1.0 + clip_high)
        low = (adv < 0) & (s < 1.0 - clip_low)
        seq_valid = mask.any(dim=-1)
        metrics = {
            "clipfrac": masked_mean((high | low).float(), mask),
            "clipfrac_low": masked_mean(low.float(), mask),
            "clipfrac_high": masked_mean(high.float(), mask),
            "seq_ratio_mean": masked_mean(seq_log_ratio.detach().exp(), seq_valid),
            **_ratio_metrics(log_ratio, mask),
        }
    return loss, metrics


def cispo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CISPO, Clipped IS-weight Policy Optimization (MiniMax-M1 report, arXiv:2506.13585).

    Per token:  L = -sg[ clip(r, 1 - eps_low, 1 + eps_high) ] * A * logp,   r = exp(logp - old_logp)

    The importance weight is clipped and detached, so EVERY token keeps a gradient -clip(r) * A (PPO would zero
    it once clipped). MiniMax-M1 bounds the weight only from above: set ``clip_low=1.0`` (lower bound 0, never
    active since r > 0). ``dual_clip_c`` is ignored. The loss VALUE is not a surrogate of the objective (it
    contains logp); only its gradient is meaningful. ``clipfrac*`` count tokens whose weight was clipped.
    """
    mask = _check_shapes(action_mask, logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    adv = advantages.detach()
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = log_ratio.detach().exp()  # [batch, seq], no grad
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss_mat = -weight * adv * logprobs
    loss_mat = _weighted(loss_mat, token_weights)
    loss = aggregate_loss(loss_mat, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)

    with torch.no_grad():
        high = ratio > 1.0 + clip_high
        low = ratio < 1.0 - clip_low
        metrics = {
            "clipfrac": masked_mean((high | low).float(), mask),
            "clipfrac_low": masked_mean(low.float(), mask),
            "clipfrac_high": masked_mean(high.float(), mask),
            **_ratio_metrics(log_ratio, mask),
        }
    return loss, metrics


def reinforce_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor | None,
    advantages: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float | None = None,
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Vanilla REINFORCE (Williams 1992): L = -A * logp per token.

    "Vanilla" means no importance ratio and no clipping: it is the on-policy policy gradient, correct only when
    the data comes from the current policy (one update per rollout). ``old_logprobs`` is optional and used for
    the ratio/KL metrics only; the clip arguments are ignored.
    """
    mask = _check_shapes(action_mask, logprobs=logprobs, old_logprobs=old_logprobs, advantages=advantages)
    loss_mat = -advantages.detach() * logprobs
    loss_mat = _weighted(loss_mat, token_weights)
    loss = aggregate_loss(loss_mat, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)
    metrics: dict[str, torch.Tensor] = {}
    if old_logprobs is not None:
        log_ratio = (logprobs - old_logprobs).detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        metrics.update(_ratio_metrics(log_ratio, mask))
    return loss, metrics


PolicyLoss = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]

POLICY_LOSSES: dict[str, PolicyLoss] = {
    "ppo": ppo_policy_loss,
    "gspo": gspo_policy_loss,
    "cispo": cispo_policy_loss,
    "reinforce": reinforce_policy_loss,
}


def get_policy_loss(name: str) -> PolicyLoss:
    """Return the policy loss registered under ``name``; ``ValueError`` listing the valid names otherwise."""
    try:
        return POLICY_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown policy loss {name!r}; valid names: {sorted(POLICY_LOSSES)}") from None


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    action_mask: torch.Tensor,
    *,
    clip_eps: float | None = 0.2,
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped critic loss (PPO; as in OpenAI baselines, verl, OpenRLHF, ORZ).

    Per token, with V the new values, V_old the rollout values, R the returns::

        V_clip = V_old + clip(V - V_old, -eps, eps)
        L      = 0.5 * max((V - R)^2, (V_clip - R)^2)          (0.5 * (V - R)^2 when clip_eps is None)

    Shapes: all [batch, seq]. Metrics: ``vf_clipfrac`` (tokens where the clipped term is strictly larger, i.e.
    the gradient is cut), ``vf_mean`` (mean V), ``vf_error`` (mean (V - R)^2), local masked means.
    """
    mask = _check_shapes(action_mask, values=values, old_values=old_values, returns=returns)
    old_values, returns = old_values.detach(), returns.detach()
    loss_unclipped = (values - returns) ** 2
    if clip_eps is None:
        loss_mat = 0.5 * loss_unclipped
        clipped_active = torch.zeros_like(mask)
    else:
        values_clipped = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
        loss_clipped = (values_clipped - returns) ** 2
        loss_mat = 0.5 * torch.maximum(loss_unclipped, loss_clipped)
        clipped_active = loss_clipped > loss_unclipped
    loss = aggregate_loss(loss_mat, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)
    with torch.no_grad():
        metrics = {
            "vf_clipfrac": masked_mean(clipped_active.float(), mask),
            "vf_mean": masked_mean(values.detach().float(), mask),
            "vf_error": masked_mean(loss_unclipped.detach().float(), mask),
        }
    return loss, metrics

"""Rollout-policy correction: importance weights between the rollout engine (vLLM) and the trainer.

The rollout engine samples a_t ~ pi_rollout and returns log pi_rollout(a_t). The trainer recomputes the same
tokens' log-probs with its own weights, log pi_old(a_t) (the behaviour policy of the PPO ratio). Even with
identical weights the two differ (bf16 vs fp32, different kernels, stale weights in async runs), so the batch is
slightly off-policy for pi_old. Per valid token (all tensors [batch, seq], m the action mask)::

    log rho_t = clamp(log pi_old(a_t) - log pi_rollout(a_t), -20, 20)       per-token log ratio, 0 on padding
    log rho   = sum_t m_t log rho_t                                          sequence log ratio     [batch]
    log rho_g = sum_t m_t log rho_t / sum_t m_t                              geometric mean          [batch]

Modes (``ROLLOUT_CORRECTION_MODES``), C = ``cap``, [L, U] = [``lower``, ``upper``] (U defaults to C, L to 1/U)::

    none       w_t = 1                                        monitoring only (e.g. on-policy bf16 runs)
    token_tis  w_t = min(rho_t, C)                            truncated IS, per token   (verl rollout_is="token",
                                                                                         TRL "token_truncate")
    seq_tis    w_t = min(rho, C)                              truncated IS, per sequence (verl "sequence",
                                                                                         TRL "sequence_truncate")
    token_mis  keep_t = [L <= rho_t <= U],  w_t = rho_t keep_t    masked IS, per token   (TRL "token_mask")
    seq_mis    keep_t = [L <= rho <= U],    w_t = rho keep_t      masked IS, per sequence (TRL "sequence_mask")
    geo_mis    keep_t = [L <= rho_g <= U],  w_t = keep_t          geometric rejection    (verl rollout_rs="geometric")

TIS is from Yao et al. 2025 ("Your efficient RL framework secretly brings you off-policy RL training"); sequence
MIS from Liu, Li et al. 2025 ("When speed kills stability: demystifying RL collapse from the training-inference
mismatch"). MIS weights: by default a kept token carries its IS ratio (rho_t or rho, hence bounded by [L, U]) and
a masked one gets 0, as TRL's ``*_mask`` modes do. With ``mis_reweight=False`` a kept token gets weight 1 (pure
rejection, verl's ``rollout_rs`` without ``rollout_is``). ``geo_mis`` is always pure rejection: rho_g is not an
importance weight (verl uses the geometric level for rejection only); its bounds must be tight (e.g. U = 1.001,
L = 0.999). TRL masks only above the cap; pass ``lower=0`` for that. verl's default lower bound is 1/U, as here.

How a trainer uses the result (``rollout_correction`` returns ``weights`` and ``keep_mask`` [batch, seq])::

    per_token_loss = weights * policy_loss_mat          # the PPO / GRPO per-token loss
    loss = aggregate_loss(per_token_loss, keep_mask, agg_mode, ...)     # verl: rejected tokens leave the mean
    loss = aggregate_loss(per_token_loss, action_mask, agg_mode, ...)   # TRL: rejected tokens count as 0

Numerical safety: each token's log ratio is clamped to [-20, 20] (``ROLLOUT_LOG_RATIO_CLAMP``, verl's safety
bound; e^20 ~ 4.9e8) and the sequence / geometric log ratio is clamped again to [-20, 20] before ``exp``, so no
weight overflows. Thresholds are compared in log space. Everything is computed in float32 under ``no_grad``:
the weights are constants for the loss (no gradient flows through them). Padding positions get weight 0,
``keep_mask`` False, and are ignored by every statistic.
"""

from __future__ import annotations

import math

import torch

from reasonrl.algos.utils import masked_mean, masked_sum

ROLLOUT_CORRECTION_MODES = ("none", "token_tis", "seq_tis", "token_mis", "seq_mis", "geo_mis")
ROLLOUT_LOG_RATIO_CLAMP = 20.0
METRIC_PREFIX = "rollout_corr/"


def check_rollout_correction_mode(mode: str) -> str:
    """Return ``mode`` if it is one of ``ROLLOUT_CORRECTION_MODES``; ``ValueError`` listing them otherwise."""
    if mode not in ROLLOUT_CORRECTION_MODES:
        raise ValueError(f"unknown rollout correction mode {mode!r}; valid modes: {list(ROLLOUT_CORRECTION_MODES)}")
    return mode


def resolve_mask_bounds(cap: float, lower: float | None = None, upper: float | None = None) -> tuple[float, float]:
    """(L, U) of the masked modes: U = ``upper`` if given else ``cap``; L = ``lower`` if given else 1/U.
    Requires 0 <= L <= 1 <= U, so that identical policies (rho = 1) are never masked."""
    upper_bound = float(cap if upper is None else upper)
    if upper_bound < 1.0:
        raise ValueError(f"rollout correction upper bound must be >= 1, got {upper_bound}")
    lower_bound = 1.0 / upper_bound if lower is None else float(lower)
    if not 0.0 <= lower_bound <= 1.0:
        raise ValueError(f"rollout correction lower bound must be in [0, 1], got {lower_bound}")
    return lower_bound, upper_bound


@torch.no_grad()
def rollout_log_ratio(old_logprobs: torch.Tensor, rollout_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho_t = clamp(log pi_old(a_t) - log pi_rollout(a_t), -20, 20) on valid tokens, 0 on padding.

    Args:
        old_logprobs: [batch, seq] trainer log-probs of the sampled tokens (any float dtype; gradient ignored).
        rollout_logprobs: [batch, seq] log-probs the rollout engine returned for the same tokens.
        mask: [batch, seq] action mask (1 = real response token).
    Returns: float32 [batch, seq], detached. +-inf inputs are clamped to +-20 as well.
    """
    m = _check_shapes(mask, old_logprobs=old_logprobs, rollout_logprobs=rollout_logprobs)
    diff = old_logprobs.detach().float() - rollout_logprobs.detach().float()  # [batch, seq]
    diff = diff.clamp(-ROLLOUT_LOG_RATIO_CLAMP, ROLLOUT_LOG_RATIO_CLAMP)
    return torch.where(m, diff, torch.zeros_like(diff))


def sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho_i = sum_t m_t log rho_t  [batch] (log of the product of the token ratios; 0 for an empty row)."""
    return masked_sum(log_ratio, mask.bool(), dim=-1)


def geometric_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho_g,i = sum_t m_t log rho_t / max(sum_t m_t, 1)  [batch] (log of the geometric mean ratio)."""
    return masked_mean(log_ratio, mask.bool(), dim=-1)


def _safe_exp(log_value: torch.Tensor) -> torch.Tensor:
    """exp(clamp(x, -20, 20)): never inf, never 0 for a finite x."""
    return log_value.clamp(-ROLLOUT_LOG_RATIO_CLAMP, ROLLOUT_LOG_RATIO_CLAMP).exp()


def _log_bound(value: float) -> float:
    """log of a threshold, -inf for 0."""
    return math.log(value) if value > 0 else -math.inf


def _zero_padding(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, weights, torch.zeros_like(weights))


@torch.no_grad()
def token_tis_weights(log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """Token-level truncated IS: w_t = min(rho_t, C) on valid tokens, 0 on padding  [batch, seq]."""
    return _zero_padding(_safe_exp(log_ratio).clamp(max=cap), mask.bool())


@torch.no_grad()
def seq_tis_weights(log_ratio: torch.Tensor, mask: torch.Tensor, cap: float) -> torch.Tensor:
    """Sequence-level truncated IS: w_t = min(exp(sum_t log rho_t), C), the same for every valid token of a row,
    0 on padding  [batch, seq]."""
    seq_weight = _safe_exp(sequence_log_ratio(log_ratio, mask)).clamp(max=cap)  # [batch]
    return _zero_padding(seq_weight[:, None].expand_as(log_ratio), mask.bool())


@torch.no_grad()
def token_mis(
    log_ratio: torch.Tensor, mask: torch.Tensor, lower: float, upper: float, reweight: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level masked IS: keep_t = m_t [L <= rho_t <= U]; w_t = rho_t keep_t (``reweight``) or keep_t.

    Returns (weights float32 [batch, seq], keep_mask bool [batch, seq]).
    """
    m = mask.bool()
    keep = m & (log_ratio >= _log_bound(lower)) & (log_ratio <= _log_bound(upper))  # [batch, seq]
    weights = _safe_exp(log_ratio) if reweight else torch.ones_like(log_ratio)
    return _zero_padding(weights, keep), keep


def _sequence_mis(
    seq_log_value: torch.Tensor, mask: torch.Tensor, lower: float, upper: float, reweight: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep whole rows whose sequence-level log value [batch] lies in [log L, log U]; broadcast over tokens."""
    m = mask.bool()
    seq_keep = (seq_log_value >= _log_bound(lower)) & (seq_log_value <= _log_bound(upper))  # [batch]
    keep = m & seq_keep[:, None]  # [batch, seq]
    seq_weight = _safe_exp(seq_log_value) if reweight else torch.ones_like(seq_log_value)  # [batch]
    return _zero_padding(seq_weight[:, None].expand(m.shape), keep), keep


@torch.no_grad()
def seq_mis(
    log_ratio: torch.Tensor, mask: torch.Tensor, lower: float, upper: float, reweight: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level masked IS: a row is kept iff L <= rho = exp(sum_t log rho_t) <= U; kept rows get w_t = rho
    (``reweight``) or 1 on every valid token, dropped rows 0. Returns (weights [batch, seq], keep_mask bool)."""
    return _sequence_mis(sequence_log_ratio(log_ratio, mask), mask, lower, upper, reweight)


@torch.no_grad()
def geo_mis(
    log_ratio: torch.Tensor, mask: torch.Tensor, lower: float, upper: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Geometric rejection: a row is kept iff L <= rho_g = exp(mean_t log rho_t) <= U; kept rows get w_t = 1.
    Returns (weights [batch, seq], keep_mask bool)."""
    return _sequence_mis(geometric_log_ratio(log_ratio, mask), mask, lower, upper, reweight=False)


@torch.no_grad()
def rollout_correction_metrics(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    weights: torch.Tensor,
    keep_mask: torch.Tensor,
    cap: float | None = None,
) -> dict[str, float]:
    """Mismatch and correction statistics (python floats), over the valid tokens / non-empty rows of ``mask``.

    With log rho_t from :func:`rollout_log_ratio`, rho_t = exp(log rho_t), w the final weights (keys are prefixed
    with ``rollout_corr/``)::

        ratio_mean / ratio_min / ratio_max    mean / min / max of rho_t over valid tokens (before any correction)
        seq_log_ratio_mean / _min / _max      stats of log rho_i = sum_t log rho_t over non-empty rows
        logp_abs_diff_mean / _max             |log pi_old - log pi_rollout| (TRL's sampling_logp_difference)
        kl_k1                                 mean(log pi_rollout - log pi_old) = mean(-log rho_t)
        kl_k3                                 mean(rho_t - 1 - log rho_t)      (both estimate KL(rollout || trainer))
        chi2_token                            mean(rho_t^2) - 1                 (chi-square divergence, token level)
        weight_mean / weight_max              of w over valid tokens (masked tokens count as 0 in the mean)
        ess                                   (sum w)^2 / (N sum w^2) over valid tokens, in (0, 1]; 1 = uniform
        masked_token_frac                     fraction of valid tokens with keep_mask False
        masked_seq_frac                       fraction of non-empty rows with at least one masked token
        truncated_token_frac                  fraction of valid tokens whose weight reached ``cap`` (0 if cap is None)

    The KL estimators use samples from pi_rollout (the tokens were sampled by the rollout engine), so they
    estimate KL(pi_rollout || pi_old) (Schulman's k1 and k3, see ``kl.py``, with log rho clamped to [-20, 20]);
    k1 is unbiased but can be negative, k3 is unbiased and >= 0. Both are 0 when the two log-probs agree.
    Every value is 0.0 when ``mask`` has no valid token.
    """
    m = _check_shapes(mask, weights=weights, keep_mask=keep_mask)
    keep = keep_mask.bool() & m
    log_ratio = rollout_log_ratio(old_logprobs, rollout_logprobs, m)  # [batch, seq]
    ratio = log_ratio.exp()
    w = weights.detach().float()
    rows = m.any(dim=-1)  # [batch] non-empty rows
    seq_log = sequence_log_ratio(log_ratio, m)  # [batch]
    abs_diff = log_ratio.abs()
    n_tokens = int(m.sum().item())
    if n_tokens == 0:
        return {METRIC_PREFIX + name: 0.0 for name in _METRIC_NAMES}

    w_valid = w[m]
    sum_w, sum_w2 = w_valid.sum(), w_valid.square().sum()
    ess = (sum_w.square() / (n_tokens * sum_w2)) if sum_w2 > 0 else sum_w2.new_zeros(())
    truncated = keep & (w >= cap * (1.0 - 1e-6)) if cap is not None else torch.zeros_like(keep)
    metrics = {
        "ratio_mean": masked_mean(ratio, m),
        "ratio_min": ratio[m].min(),
        "ratio_max": ratio[m].max(),
        "seq_log_ratio_mean": seq_log[rows].mean(),
        "seq_log_ratio_min": seq_log[rows].min(),
        "seq_log_ratio_max": seq_log[rows].max(),
        "logp_abs_diff_mean": masked_mean(abs_diff, m),
        "logp_abs_diff_max": abs_diff[m].max(),
        "kl_k1": masked_mean(-log_ratio, m),  # log pi_rollout - log pi_old
        "kl_k3": masked_mean(ratio - 1.0 - log_ratio, m),
        "chi2_token": masked_mean(ratio.square(), m) - 1.0,
        "weight_mean": masked_mean(w, m),
        "weight_max": w_valid.max(),
        "ess": ess,
        "masked_token_frac": masked_mean((m & ~keep).float(), m),
        "masked_seq_frac": (m & ~keep).any(dim=-1)[rows].float().mean(),
        "truncated_token_frac": masked_mean(truncated.float(), m),
    }
    return {METRIC_PREFIX + name: float(value) for name, value in metrics.items()}


_METRIC_NAMES = (
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "seq_log_ratio_mean",
    "seq_log_ratio_min",
    "seq_log_ratio_max",
    "logp_abs_diff_mean",
    "logp_abs_diff_max",
    "kl_k1",
    "kl_k3",
    "chi2_token",
    "weight_mean",
    "weight_max",
    "ess",
    "masked_token_frac",
    "masked_seq_frac",
    "truncated_token_frac",
)


@torch.no_grad()
def rollout_correction(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "none",
    cap: float = 2.0,
    lower: float | None = None,
    upper: float | None = None,
    *,
    mis_reweight: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Rollout-policy correction weights, keep mask and metrics (see the module docstring for the formulas).

    Args:
        old_logprobs: [batch, seq] log pi_old(a_t) recomputed by the trainer (no gradient is taken through it).
        rollout_logprobs: [batch, seq] log pi_rollout(a_t) returned by the rollout engine.
        mask: [batch, seq] action mask.
        mode: one of ``ROLLOUT_CORRECTION_MODES``.
        cap: C of the truncated modes (``*_tis``), > 0; also the default upper bound of the masked modes.
        lower, upper: [L, U] of the masked modes (``*_mis``); U defaults to ``cap``, L to 1/U; 0 <= L <= 1 <= U.
        mis_reweight: masked modes ``token_mis`` / ``seq_mis``: kept tokens carry their IS ratio (True, TRL) or 1.
    Returns:
        weights: float32 [batch, seq], detached, 0 on padding and on masked tokens (ones on valid tokens for "none").
        keep_mask: bool [batch, seq], ``mask`` minus the masked tokens / rows (equal to ``mask`` for none / *_tis).
        metrics: dict of floats from :func:`rollout_correction_metrics` (computed in every mode).
    """
    check_rollout_correction_mode(mode)
    if cap <= 0:
        raise ValueError(f"rollout correction cap must be > 0, got {cap}")
    m = _check_shapes(mask, old_logprobs=old_logprobs, rollout_logprobs=rollout_logprobs)
    log_ratio = rollout_log_ratio(old_logprobs, rollout_logprobs, m)  # [batch, seq]
    keep = m
    if mode.endswith("_mis"):
        lower_bound, upper_bound = resolve_mask_bounds(cap, lower, upper)
    if mode == "none":
        weights = m.float()
    elif mode == "token_tis":
        weights = token_tis_weights(log_ratio, m, cap)
    elif mode == "seq_tis":
        weights = seq_tis_weights(log_ratio, m, cap)
    elif mode == "token_mis":
        weights, keep = token_mis(log_ratio, m, lower_bound, upper_bound, mis_reweight)
    elif mode == "seq_mis":
        weights, keep = seq_mis(log_ratio, m, lower_bound, upper_bound, mis_reweight)
    else:  # geo_mis
        weights, keep = geo_mis(log_ratio, m, lower_bound, upper_bound)
    metric_cap = cap if mode in ("token_tis", "seq_tis") else None
    metrics = rollout_correction_metrics(old_logprobs, rollout_logprobs, m, weights, keep, cap=metric_cap)
    return weights, keep, metrics


def _check_shapes(mask: torch.Tensor, **tensors: torch.Tensor) -> torch.Tensor:
    if mask.dim() != 2:
        raise ValueError(f"mask must be [batch, seq], got shape {tuple(mask.shape)}")
    for name, t in tensors.items():
        if t.shape != mask.shape:
            raise ValueError(f"{name} shape {tuple(t.shape)} != mask {tuple(mask.shape)}")
    return mask.bool()

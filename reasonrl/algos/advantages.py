"""Advantage estimators, chosen by name from ``ADVANTAGE_ESTIMATORS``.

Every estimator has the SAME keyword-only signature so the trainer can call any of them by name::

    advantages, returns = fn(
        token_rewards=...,        # [batch, seq] token rewards, or [batch] outcome rewards
        action_mask=...,          # [batch, seq] loss mask: 1 = token trained on, 0 = padding or a hole
        values=None,              # [batch, seq] critic values V(s_t)           (gae)
        group_ids=None,           # [batch] prompt-group ids                     (grpo, dr_grpo, rloo, *_baseline)
        gamma=1.0, lam=1.0,       # discount / GAE lambda                        (gae; gamma also reinforce_plus_plus)
        eps=1e-6,                 # added to the group std                       (grpo)
        norm_by_std=True,         # divide by the group std                      (grpo)
        baseline_rewards=None,    # [batch] reward of the greedy rollout         (remax)
    )

Inputs an estimator does not use are ignored; a missing input it needs raises ``ValueError``.
Both outputs are float32 ``[batch, seq]`` with zeros at masked positions, and are computed without autograd.

Rewards: ``token_rewards`` may be ``[batch]`` (one outcome reward per sample; it is placed at the last valid
token where a token-level view is needed) or ``[batch, seq]`` (e.g. outcome at the last token minus a per-token
KL penalty). Outcome estimators (grpo, dr_grpo, rloo, reinforce_plus_plus_baseline) use the sequence score
s_i = sum_t r_{i,t} m_{i,t}. Rewards at masked positions are ignored everywhere.

Masked positions in the MIDDLE of a response (holes: e.g. tool output in multi-turn) are skipped by the
recursions (gae, reinforce_plus_plus, remax): the running value/advantage/return is carried through them unchanged
and undiscounted, so valid tokens get the same result as if the masked tokens were removed (verl's multi-turn GAE
rule). Rewards and values at masked positions are ignored; an outcome reward sits on the last loss token of its row
(a row without any loss token gets none). Outcome estimators score a sample by its loss tokens.

Singleton groups (a prompt with one sample): grpo, dr_grpo, rloo and reinforce_plus_plus_baseline give
advantage 0 before any whitening: with one sample there is no baseline to compare against.

Batch normalisation (``compute_advantages(..., whiten=True)``, call it on the full rollout batch), one rule:

* ``gae`` is WHITENED: ``(A - mean) * rsqrt(var + 1e-8)`` over all valid tokens (ORZ's ``advantage_normalize``,
  verl's GAE). The critic is the baseline; centring the batch is part of ORZ's recipe.
* the estimators with a per-sample baseline (``BASELINE_ESTIMATORS``: grpo, dr_grpo, rloo,
  reinforce_plus_plus_baseline, remax) are only SCALED: ``A * rsqrt(var + 1e-8)``. Subtracting the
  token-weighted batch mean would give a prompt group whose samples all got the same reward (all wrong or all
  right) a non-zero advantage on every token, i.e. reinforce wrong answers; scaling keeps it exactly 0.
* ``reinforce_plus_plus`` whitens by definition (no baseline, no groups), ``reinforce_plus_plus_baseline``
  scales by definition; neither is normalised twice.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reasonrl.algos.utils import group_stats, masked_scale, masked_sum, masked_whiten, outcome_to_token_rewards

# ----------------------------------------------------------------------------------------------------------------
# input helpers


def _check_mask(action_mask: torch.Tensor) -> torch.Tensor:
    if action_mask is None or action_mask.dim() != 2:
        raise ValueError("action_mask must be a [batch, seq] tensor")
    return action_mask.bool()


def _token_rewards(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[batch] or [batch, seq] rewards -> [batch, seq] float32 with zeros at masked positions."""
    if token_rewards is None:
        raise ValueError("token_rewards is required ([batch] or [batch, seq])")
    if token_rewards.dim() == 1:
        return outcome_to_token_rewards(token_rewards, mask)
    if token_rewards.shape != mask.shape:
        raise ValueError(f"token_rewards shape {tuple(token_rewards.shape)} != action_mask {tuple(mask.shape)}")
    return torch.where(mask, token_rewards.float(), torch.zeros_like(token_rewards, dtype=torch.float32))


def _sequence_scores(token_rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s_i = sum_t r_{i,t} m_{i,t}  -> [batch]. A [batch] reward is used as is."""
    if token_rewards is None:
        raise ValueError("token_rewards is required ([batch] or [batch, seq])")
    if token_rewards.dim() == 1:
        if token_rewards.shape[0] != mask.shape[0]:
            raise ValueError(f"token_rewards must be [batch]={mask.shape[0]}, got {tuple(token_rewards.shape)}")
        return token_rewards.float()
    return masked_sum(_token_rewards(token_rewards, mask), mask, dim=-1)


def _require(estimator: str, **inputs: torch.Tensor | None) -> None:
    for name, value in inputs.items():
        if value is None:
            raise ValueError(f"advantage estimator '{estimator}' needs `{name}`, which was not given")


def _broadcast(per_sample: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[batch] -> [batch, seq], zeros at masked positions."""
    return torch.where(mask, per_sample[:, None].expand(mask.shape), torch.zeros(mask.shape, device=mask.device))


def _has_holes(mask: torch.Tensor) -> bool:
    """Whether some row has a masked token followed by a valid one (multi-turn holes, or left padding)."""
    return bool((mask[:, 1:] & ~mask[:, :-1]).any())


def _next_valid(x: torch.Tensor, mask: torch.Tensor, holes: bool) -> torch.Tensor:
    """out[i, t] = x[i, k] for the first valid k > t, 0 when there is none. [batch, seq], a new tensor.

    ``x`` must be 0 at masked positions. The index of the next valid token is a reverse running minimum of
    ``where(mask, t, seq)``. ``holes``: :func:`_has_holes` of ``mask`` (computed once by the caller).
    """
    batch, seq = mask.shape
    if not holes:  # valid tokens are one block: the next valid token is t + 1 (or a masked 0)
        return torch.nn.functional.pad(x[:, 1:], (0, 1))
    positions = torch.arange(seq, device=mask.device).expand(batch, seq)
    index = torch.where(mask, positions, seq)  # [batch, seq], seq = "none"
    next_index = index.flip(1).cummin(dim=1).values.flip(1)  # first valid k >= t
    next_index = torch.nn.functional.pad(next_index[:, 1:], (0, 1), value=seq)  # first valid k > t
    return torch.nn.functional.pad(x, (0, 1)).gather(1, next_index)  # column seq holds the 0


def _skip_masked_discounts(discount: float, mask: torch.Tensor, holes: bool) -> float | torch.Tensor:
    """Per-token discounts for ``discounted_reverse_cumsum`` that carry the sum through masked holes unchanged:
    d_t = discount at valid tokens, 1 at masked ones (a plain float when no hole can matter)."""
    if discount == 1.0 or not holes:
        return discount
    return torch.where(mask, torch.tensor(discount, dtype=torch.float32, device=mask.device), 1.0)


def discounted_reverse_cumsum(x: torch.Tensor, discount: float | torch.Tensor, block: int = 64) -> torch.Tensor:
    """y_t = x_t + d_t * y_{t+1} along the last dim (y after the end = 0). x: [batch, seq] -> [batch, seq].

    ``discount``: one float d, so y_t = sum_{k >= 0} d^k x_{t+k}; or per-token discounts d [batch, seq], so
    y_t = sum_{k >= t} (prod_{t <= j < k} d_j) x_k. How, all without a Python loop over tokens:

    * d == 1: a plain reverse cumsum.
    * float d: blocks of ``block`` tokens, [batch, seq / block, block]. Inside each block a [block, block]
      matmul with W[t, k] = d^(k - t) (k >= t, else 0) gives the in-block sums y'. The value at each block's
      first token obeys the same recursion one level up, Y_b = y'_b[0] + d^block * Y_{b+1} ([batch, seq / block],
      solved by calling this function again), and then y_t = y'_t + d^(block - t) * Y_{b+1}. Every weight is a
      power of d with exponent <= block, never divided by, so nothing overflows for d <= 1 (small powers
      underflow to 0, their limit). On CUDA the matmul runs in float64, so TF32 settings cannot change it.
    * per-token d (masked holes): a log-depth doubling scan (Hillis-Steele) on (y, D): after the pass with shift
      s, y_t and D_t hold the sum and the discount product over [t, t + 2s); one pass is y_t += D_t * y_{t+s},
      D_t *= D_{t+s}: ceil(log2(seq)) elementwise passes, products of factors <= 1, tree-shaped sums.
    """
    if isinstance(discount, torch.Tensor):
        return _reverse_affine_scan(x, discount.to(x.dtype))
    if discount == 1.0:
        return x.flip(-1).cumsum(-1).flip(-1)
    batch, seq = x.shape
    num_blocks = -(-seq // block)
    blocks = torch.nn.functional.pad(x, (0, num_blocks * block - seq)).view(batch, num_blocks, block)
    matmul_dtype = torch.float64 if x.is_cuda else x.dtype
    steps = torch.arange(block, dtype=torch.float64, device=x.device)  # [block]
    distance = steps[None, :] - steps[:, None]  # [block, block]: k - t
    weights = torch.where(distance >= 0, discount ** distance.clamp(min=0), 0.0)  # W[t, k] = d^(k - t)
    y = (blocks.to(matmul_dtype) @ weights.T.to(matmul_dtype)).to(x.dtype)  # [batch, num_blocks, block]
    if num_blocks > 1:
        # y at each block's first token: Y_b = y_b[0] + d^block * Y_{b+1}, the same scan one level up
        block_starts = discounted_reverse_cumsum(y[:, :, 0].contiguous(), discount**block, block)  # [batch, nb]
        next_block_start = torch.nn.functional.pad(block_starts[:, 1:], (0, 1))  # [batch, num_blocks]
        to_next_block = (discount ** (block - steps)).to(x.dtype)  # [block]: d^(block - t)
        y.addcmul_(next_block_start[:, :, None], to_next_block)
    return y.view(batch, num_blocks * block)[:, :seq]


def _reverse_affine_scan(x: torch.Tensor, discounts: torch.Tensor) -> torch.Tensor:
    """y_t = x_t + d_t * y_{t+1} with per-token d [batch, seq], by the doubling scan described above."""
    seq, shift = x.shape[-1], 1
    y, d = x.clone(), discounts.clone()
    while shift < seq:
        y[..., : seq - shift] += d[..., : seq - shift] * y[..., shift:]
        d[..., : seq - shift] = d[..., : seq - shift] * d[..., shift:]
        shift *= 2
    return y


# ----------------------------------------------------------------------------------------------------------------
# estimators


@torch.no_grad()
def gae_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438), as used by PPO/ORZ.

    The rule for a loss mask with holes: the recursion runs over the loss tokens only. For row i let
    u_1 < ... < u_K be the positions with m[i, u] = 1 (``action_mask`` [batch, seq]); with r, V [batch, seq]::

        delta_{u_k} = r_{u_k} + gamma * V_{u_{k+1}} - V_{u_k}          V_{u_{K+1}} = 0
        A_{u_k}     = delta_{u_k} + gamma * lam * A_{u_{k+1}}          A_{u_{K+1}} = 0
        R_{u_k}     = A_{u_k} + V_{u_k}                  (returns, taken BEFORE any whitening)
        A_t = R_t = 0 where m[i, t] = 0                   (padding and holes; r_t and V_t there are never read)

    i.e. GAE of the response with its masked tokens removed: a masked span (tool output) neither discounts nor
    bootstraps; the value after an assistant turn is that of the next loss token. verl's
    ``compute_gae_advantage_return`` does the same (its loop carries ``nextvalues`` and ``lastgaelam`` through
    observation tokens), except that it leaves the carried value at masked positions where this gives 0 (no loss
    reads them). Without holes u_k = k and this is textbook GAE.
    With gamma = lam = 1 and an outcome reward R at the last token: A_t = R - V_t and R_t = R (ORZ's recipe).

    Vectorised (no Python loop over tokens), [batch, seq] tensors throughout::

        V_next_t = V_k for the first valid k > t (0 if none)       (``_next_valid``; V_{t+1} without holes)
        delta_t  = (r_t + gamma * V_next_t - V_t) * m_t
        A_t      = delta_t + d_t * A_{t+1},  d_t = gamma * lam at valid tokens, 1 at masked ones
                 = sum_{k >= 0} (gamma * lam)^k * delta_{t+k}       when there are no holes

    computed by ``discounted_reverse_cumsum`` (a reverse cumsum for gamma * lam = 1, else a blocked scan), then
    zeroed at masked positions. Equal to the recursion up to fp32 rounding.

    Needs: token_rewards [batch] or [batch, seq], values [batch, seq]. Uses gamma, lam.
    Returns: (advantages [batch, seq], returns [batch, seq]), zeros at masked positions.
    """
    _require("gae", values=values)
    mask = _check_mask(action_mask)
    rewards = _token_rewards(token_rewards, mask)  # [batch, seq]
    values = values.detach().float()  # [batch, seq]
    if values.shape != mask.shape:
        raise ValueError(f"values shape {tuple(values.shape)} != action_mask {tuple(mask.shape)}")
    padding = ~mask
    values = values.masked_fill(padding, 0.0)  # padded values are never used
    # in-place steps on fresh [batch, seq] tensors: at this size the work is memory-bound
    holes = _has_holes(mask)
    deltas = _next_valid(values, mask, holes).mul_(gamma).add_(rewards).sub_(values).masked_fill_(padding, 0.0)
    advantages = discounted_reverse_cumsum(deltas, _skip_masked_discounts(gamma * lam, mask, holes))
    advantages = advantages.masked_fill_(padding, 0.0)
    returns = advantages + values  # 0 at masked positions: both terms are
    return advantages, returns


@torch.no_grad()
def grpo_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO group-normalised outcome advantage (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300).

    For sample i of prompt group g with score s_i::

        A_i = (s_i - mean_g(s)) / (std_g(s) + eps)     if norm_by_std   (GRPO)
        A_i =  s_i - mean_g(s)                          otherwise        (Dr.GRPO, Liu et al. 2025, arXiv:2503.20783)

    std_g is the UNBIASED (N-1) group std, like verl/TRL/OpenRLHF (ORZ used the biased np.std, and its
    ``if std := np.std(...) > 0`` precedence slip means it never divided at all). eps=1e-6 is added to the std
    (verl's value; TRL uses 1e-4, OpenRLHF 1e-9). A zero-variance group gets A = 0. A singleton group gets
    A = 0 (verl: s / (1 + eps)). A_i is broadcast to every valid token; returns == advantages.

    Needs: token_rewards, group_ids [batch]. Uses eps, norm_by_std.
    """
    _require("grpo", group_ids=group_ids)
    mask = _check_mask(action_mask)
    scores = _sequence_scores(token_rewards, mask)  # [batch]
    mean, std, count = group_stats(scores, group_ids)  # [batch] each
    adv = scores - mean
    if norm_by_std:
        adv = adv / (std + eps)
    adv = torch.where(count > 1, adv, torch.zeros_like(adv))  # singleton groups: no baseline -> 0
    advantages = _broadcast(adv, mask)
    return advantages, advantages.clone()


@torch.no_grad()
def dr_grpo_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dr.GRPO (Liu et al. 2025, arXiv:2503.20783): A_i = s_i - mean_g(s), i.e. GRPO with ``norm_by_std`` forced
    off (the given ``norm_by_std`` is ignored). Pair it with ``agg_mode='seq-mean-token-sum-norm'`` to also
    remove GRPO's length bias. Needs: token_rewards, group_ids [batch]. Singleton groups: 0."""
    _require("dr_grpo", group_ids=group_ids)
    return grpo_advantages(
        token_rewards=token_rewards, action_mask=action_mask, group_ids=group_ids, eps=eps, norm_by_std=False
    )


@torch.no_grad()
def rloo_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE Leave-One-Out (Kool et al. 2019; Ahmadian et al. 2024, arXiv:2402.14740).

    For a group of size n > 1::

        A_i = s_i - (1 / (n - 1)) * sum_{j != i} s_j   ( = n / (n - 1) * (s_i - mean_g(s)) )

    A singleton group gets A = 0 (verl's loop version keeps A = s, its vectorised version gives 0).
    Broadcast to every valid token; returns == advantages. Needs: token_rewards, group_ids [batch].
    """
    _require("rloo", group_ids=group_ids)
    mask = _check_mask(action_mask)
    scores = _sequence_scores(token_rewards, mask)  # [batch]
    mean, _, count = group_stats(scores, group_ids)  # [batch]
    others_mean = (mean * count - scores) / (count - 1).clamp(min=1)
    adv = torch.where(count > 1, scores - others_mean, torch.zeros_like(scores))
    advantages = _broadcast(adv, mask)
    return advantages, advantages.clone()


def _reward_to_go(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_next over valid tokens; masked positions carry G_next through. -> [batch, seq].

    Vectorised like ``gae_advantages``: G = discounted_reverse_cumsum(r, d) with d_t = gamma at valid tokens, 1 at
    masked ones (``rewards`` is already 0 at masked positions).
    """
    returns = discounted_reverse_cumsum(rewards, _skip_masked_discounts(gamma, mask, _has_holes(mask)))
    return torch.where(mask, returns, torch.zeros_like(returns))


@torch.no_grad()
def reinforce_plus_plus_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): discounted return-to-go, then batch whitening.

    G_t = r_t + gamma * G_{t+1} over valid tokens (masked positions carried through; verl instead resets the
    running return at masked positions, which only differs for masks with holes).
    returns = G;  advantages = whiten(G) over all valid tokens of the batch (unbiased var, rsqrt(var + 1e-8)).

    Needs: token_rewards ([batch, seq] to make use of per-token KL rewards). Uses gamma.
    """
    mask = _check_mask(action_mask)
    returns = _reward_to_go(_token_rewards(token_rewards, mask), mask, gamma)  # [batch, seq]
    return masked_whiten(returns, mask), returns


@torch.no_grad()
def reinforce_plus_plus_baseline_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (Hu 2025, arXiv:2501.03262): group-mean baseline, then batch scaling.

    A_i = s_i - mean_g(s) (0 for a singleton group; verl uses mean 0 there, i.e. A = s), broadcast to valid
    tokens, then divided by the std over all valid tokens of the batch: A * rsqrt(var + 1e-8). verl also
    subtracts the token-weighted batch mean, which moves zero-variance groups off 0; reasonrl does not.
    returns == advantages (as in verl). Needs: token_rewards, group_ids [batch].
    """
    _require("reinforce_plus_plus_baseline", group_ids=group_ids)
    mask = _check_mask(action_mask)
    scores = _sequence_scores(token_rewards, mask)  # [batch]
    mean, _, count = group_stats(scores, group_ids)
    adv = torch.where(count > 1, scores - mean, torch.zeros_like(scores))
    advantages = masked_scale(_broadcast(adv, mask), mask)
    return advantages, advantages.clone()


@torch.no_grad()
def remax_advantages(
    *,
    token_rewards: torch.Tensor,
    action_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    eps: float = 1e-6,
    norm_by_std: bool = True,
    baseline_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv:2310.10505): the greedy rollout's reward is the baseline.

    returns_t = sum_{t' >= t, valid} r_{t'}   (undiscounted reward-to-go; gamma is not used, as in verl)
    A_t       = returns_t - b_i              where b_i = baseline_rewards[i] (reward of the greedy response)

    Needs: token_rewards, baseline_rewards [batch].
    """
    _require("remax", baseline_rewards=baseline_rewards)
    mask = _check_mask(action_mask)
    if baseline_rewards.shape != (mask.shape[0],):
        raise ValueError(f"baseline_rewards must be [batch]={mask.shape[0]}, got {tuple(baseline_rewards.shape)}")
    returns = _reward_to_go(_token_rewards(token_rewards, mask), mask, 1.0)  # [batch, seq]
    advantages = returns - _broadcast(baseline_rewards.detach().float(), mask)
    return advantages, returns


# ----------------------------------------------------------------------------------------------------------------
# registry

AdvantageEstimator = Callable[..., tuple[torch.Tensor, torch.Tensor]]

ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "gae": gae_advantages,
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
    "rloo": rloo_advantages,
    "reinforce_plus_plus": reinforce_plus_plus_advantages,
    "reinforce_plus_plus_baseline": reinforce_plus_plus_baseline_advantages,
    "remax": remax_advantages,
}

# Estimators whose definition already ends with batch normalisation (compute_advantages never applies it twice).
WHITENED_BY_DEFINITION = frozenset({"reinforce_plus_plus", "reinforce_plus_plus_baseline"})
# Estimators with a per-sample baseline: ``whiten=True`` only scales them, so a zero advantage stays exactly 0.
BASELINE_ESTIMATORS = frozenset({"grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline", "remax"})


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """Return the estimator registered under ``name``; ``ValueError`` listing the valid names otherwise."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        raise ValueError(f"unknown advantage estimator {name!r}; valid names: {sorted(ADVANTAGE_ESTIMATORS)}") from None


def compute_advantages(name: str, *, whiten: bool = False, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Run estimator ``name`` with ``kwargs`` (the common signature above), then optionally normalise.

    ``whiten=True`` normalises the advantages (not the returns, which stay the critic's targets) over the batch:
    whitening for ``gae``, scaling only for ``BASELINE_ESTIMATORS`` (a zero advantage stays 0), nothing more for
    ``WHITENED_BY_DEFINITION``. Returns (advantages, returns) [batch, seq].
    """
    advantages, returns = get_advantage_estimator(name)(**kwargs)
    if whiten and name not in WHITENED_BY_DEFINITION:
        normalise = masked_scale if name in BASELINE_ESTIMATORS else masked_whiten
        advantages = normalise(advantages, kwargs["action_mask"].bool())
    return advantages, returns

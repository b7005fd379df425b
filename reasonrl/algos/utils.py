"""Small masked-tensor and prompt-group helpers shared by the algorithm modules.

Conventions used across ``reasonrl.algos``:

* token tensors are ``[batch, seq]`` over RESPONSE tokens only;
* ``action_mask`` is ``[batch, seq]``, the loss mask: 1 for a response token trained on, 0 for padding and for
  masked tokens inside a response (holes: tool output in multi-turn), which every function treats as absent;
* ``group_ids`` is a LongTensor ``[batch]``; samples of the same prompt share an id. Groups need not be
  contiguous nor of equal size.

Statistics conventions (one rule for the whole package):

* every standard deviation / variance is the UNBIASED (Bessel, N-1) estimator, like ``torch.std``;
  a set with fewer than 2 elements has variance 0 by definition here (instead of NaN or an error);
* masked means of metrics divide by ``max(sum(mask), 1)`` so an all-padding tensor gives 0, not NaN.
"""

from __future__ import annotations

import torch

# Epsilon added to the VARIANCE inside the rsqrt of batch whitening: (x - mu) * rsqrt(var + WHITEN_EPS).
WHITEN_EPS = 1e-8


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) over ``dim`` (all elements when ``dim`` is None). Masked entries never contribute,
    even if they hold inf/NaN (``torch.where`` is used, not a product)."""
    x = torch.where(mask.bool(), x, torch.zeros_like(x))
    return x.sum() if dim is None else x.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """sum(x * mask) / max(sum(mask), 1) over ``dim`` (all elements when ``dim`` is None)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype if x.is_floating_point() else torch.float32)


def masked_var(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unbiased variance of the valid entries of ``x`` (all dims): sum((x - mu)^2 m) / (N - 1); 0 when N < 2."""
    n = mask.sum().to(x.dtype)
    mean = masked_sum(x, mask) / n.clamp(min=1)
    sq = masked_sum((x - mean) ** 2, mask)
    return torch.where(n >= 2, sq / (n - 1).clamp(min=1), torch.zeros_like(sq))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = WHITEN_EPS) -> torch.Tensor:
    """Batch-global whitening over all valid tokens of ``x`` [batch, seq].

    out = (x - mu) * rsqrt(var + eps) on valid tokens, 0 on masked ones, where mu and var (unbiased) are taken
    over every valid token of the whole tensor. Call it on the FULL rollout batch (before splitting into
    micro-batches / data-parallel shards). It moves zeros: use :func:`masked_scale` where 0 must stay 0.
    """
    m = mask.bool()
    mean = masked_sum(x, m) / m.sum().clamp(min=1).to(x.dtype)
    out = (x - mean) * torch.rsqrt(masked_var(x, m) + eps)
    return torch.where(m, out, torch.zeros_like(out))


def masked_scale(x: torch.Tensor, mask: torch.Tensor, eps: float = WHITEN_EPS) -> torch.Tensor:
    """Scale-only batch normalisation over all valid tokens of ``x`` [batch, seq]: out = x * rsqrt(var + eps).

    The same unbiased token variance as :func:`masked_whiten`, but no mean is subtracted, so an advantage of
    exactly 0 (a prompt group whose samples all got the same reward) stays exactly 0 and every sign is kept.
    """
    m = mask.bool()
    out = x * torch.rsqrt(masked_var(x, m) + eps)
    return torch.where(m, out, torch.zeros_like(out))


def last_token_index(action_mask: torch.Tensor) -> torch.Tensor:
    """Index [batch] of the last valid token of each row (0 for a row with no valid token)."""
    seq_len = action_mask.shape[-1]
    positions = torch.arange(seq_len, device=action_mask.device).expand_as(action_mask)  # [batch, seq]
    return torch.where(action_mask.bool(), positions, torch.zeros_like(positions)).max(dim=-1).values


def outcome_to_token_rewards(rewards: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Place one outcome reward per sample at its last valid response token.

    Args:
        rewards: [batch] scalar reward per sample.
        action_mask: [batch, seq].
    Returns:
        [batch, seq] float32 tensor, ``rewards[i]`` at the last valid token of row i, 0 elsewhere.
        A row without any valid token gets no reward (all zeros).
    """
    if rewards.dim() != 1 or rewards.shape[0] != action_mask.shape[0]:
        raise ValueError(f"rewards must be [batch]={action_mask.shape[0]}, got shape {tuple(rewards.shape)}")
    mask = action_mask.bool()
    out = torch.zeros(action_mask.shape, dtype=torch.float32, device=action_mask.device)  # [batch, seq]
    idx = last_token_index(mask)  # [batch]
    has_token = mask.any(dim=-1)  # [batch]
    rows = torch.arange(action_mask.shape[0], device=action_mask.device)
    out[rows, idx] = torch.where(has_token, rewards.float(), torch.zeros_like(rewards, dtype=torch.float32))
    return out


def group_index(group_ids: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids [batch] to dense indices 0..G-1. Returns (inverse [batch], G)."""
    group_ids = torch.as_tensor(group_ids)
    if group_ids.dim() != 1 or group_ids.shape[0] != batch_size:
        raise ValueError(f"group_ids must be [batch]={batch_size}, got shape {tuple(group_ids.shape)}")
    if group_ids.is_floating_point() or group_ids.is_complex():
        raise ValueError(f"group_ids must be an integer tensor, got dtype {group_ids.dtype}")
    _, inverse = torch.unique(group_ids, return_inverse=True)
    num_groups = int(inverse.max().item()) + 1 if batch_size > 0 else 0
    return inverse, num_groups


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample statistics of the sample's prompt group.

    Args:
        scores: [batch] float.
        group_ids: [batch] integer ids (any order, any group sizes).
    Returns:
        (mean [batch], std [batch], count [batch]): the group mean, the UNBIASED group std (0 for a group of
        size 1) and the group size, each broadcast back to the samples of the group.
    """
    scores = scores.float()
    inverse, num_groups = group_index(group_ids, scores.shape[0])
    zeros = torch.zeros(num_groups, dtype=scores.dtype, device=scores.device)
    counts = zeros.index_add(0, inverse, torch.ones_like(scores))  # [G]
    sums = zeros.index_add(0, inverse, scores)  # [G]
    means = sums / counts  # [G]
    sq = zeros.index_add(0, inverse, (scores - means[inverse]) ** 2)  # [G]
    var = torch.where(counts > 1, sq / (counts - 1).clamp(min=1), torch.zeros_like(sq))  # [G]
    return means[inverse], var.sqrt()[inverse], counts[inverse]

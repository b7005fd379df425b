"""The pure-math pieces of DAPO (Yu et al. 2025, arXiv:2503.14476): soft overlong punishment and the
zero-reward-variance predicate used by dynamic sampling. (Clip-higher is ``clip_low``/``clip_high`` of the
policy losses; the token-level loss is ``agg_mode='token-mean'``.)"""

from __future__ import annotations

import torch

from reasonrl.algos.utils import group_index


def soft_overlong_punishment(
    response_lengths: torch.Tensor,
    max_response_length: int,
    overlong_buffer_len: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """DAPO's soft overlong punishment (eq. 13), a length penalty ADDED to the task reward.

    With L = response length, L_max = max_response_length, L_cache = overlong_buffer_len::

        R_len(L) = 0                                          if L <= L_max - L_cache
                 = -penalty_factor * (L - (L_max - L_cache)) / L_cache    if L_max - L_cache < L <= L_max
                 = -penalty_factor                            if L > L_max

    Args:
        response_lengths: [batch] number of response tokens per sample.
        max_response_length: L_max.
        overlong_buffer_len: L_cache, 0 < L_cache <= L_max.
        penalty_factor: penalty at (and beyond) L_max; DAPO uses 1.0.
    Returns: [batch] float32 penalties in [-penalty_factor, 0].
    Differs from verl's DAPORewardManager only beyond L_max, where verl keeps decreasing linearly; here the
    penalty is capped at -penalty_factor as in the paper.
    """
    if not 0 < overlong_buffer_len <= max_response_length:
        raise ValueError(
            f"need 0 < overlong_buffer_len <= max_response_length, got {overlong_buffer_len}, {max_response_length}"
        )
    lengths = torch.as_tensor(response_lengths).float()  # [batch]
    exceed = lengths - (max_response_length - overlong_buffer_len)  # [batch]
    fraction = (exceed / overlong_buffer_len).clamp(min=0.0, max=1.0)
    return -penalty_factor * fraction


def zero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor, atol: float = 0.0) -> torch.Tensor:
    """True for every sample whose prompt group has zero reward variance: max_g(r) - min_g(r) <= atol.

    These groups give every sample the same reward, hence zero GRPO/RLOO advantage and no policy gradient;
    DAPO's dynamic sampling drops them and samples more prompts. A singleton group counts as zero-variance.
    ``atol`` > 0 treats near-equal continuous rewards as equal (a range test, not a mean test, so it works for
    non-binary rewards).

    Args:
        rewards: [batch] scalar reward per sample (sum token rewards first if you have [batch, seq]).
        group_ids: [batch] integer prompt-group ids (any order, any sizes).
    Returns: BoolTensor [batch].
    """
    rewards = torch.as_tensor(rewards).float()
    inverse, num_groups = group_index(group_ids, rewards.shape[0])
    inf = torch.full((num_groups,), float("inf"), device=rewards.device)
    group_max = (-inf).scatter_reduce(0, inverse, rewards, reduce="amax")  # [G]
    group_min = inf.scatter_reduce(0, inverse, rewards, reduce="amin")  # [G]
    return (group_max - group_min)[inverse] <= atol


def dynamic_sampling_keep_mask(rewards: torch.Tensor, group_ids: torch.Tensor, atol: float = 0.0) -> torch.Tensor:
    """BoolTensor [batch]: True for samples to KEEP under DAPO dynamic sampling (their group's rewards vary)."""
    return ~zero_variance_groups(rewards, group_ids, atol)

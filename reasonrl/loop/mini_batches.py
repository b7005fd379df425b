"""The mini-batches of a step's updates, cut after dispatch on each rank's shard (the shards themselves, and the
ranks' outputs put back together, are :mod:`reasonrl.dataplane.sharding`'s)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from reasonrl.utils.rng import derive_seed


def mini_batch_order(cfg, role: str, step: int, epoch: int, n: int, num_mini_batches: int) -> list[int]:
    """The sample order of pass ``epoch`` of ``role`` over step ``step``'s rollout of ``n`` samples, cut into
    mini-batches by the caller: a permutation seeded by (seed, role, step, epoch) when ``cfg.shuffle_mini_batches``
    (so a resumed run repeats it), else batch order; batch order too with one mini-batch (a permutation would
    change only the float summation order)."""
    if not cfg.shuffle_mini_batches or num_mini_batches <= 1:
        return list(range(n))
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "mini_batches", role, step, epoch))
    return torch.randperm(n, generator=gen).tolist()


def rank_mini_batches(
    cfg, role: str, step: int, epoch: int, shard_sizes: Sequence[int], bounds: Sequence[tuple[int, int]]
) -> list[list[list[int]]]:
    """Pass ``epoch`` of ``role`` over step ``step`` cut into mini-batches after dispatch (as verl does).

    Each rank ``r`` permutes the positions ``0..shard_sizes[r]-1`` of its shard with :func:`mini_batch_order`
    (seeded by (seed, role, step, epoch): a resumed run repeats it) and cuts them with the config's mini-batch
    ``bounds`` (planned for the full rollout) scaled to its shard. Mini-batch ``k`` is the union over ranks of the
    ``k``-th slices; a mini-batch empty on every rank is dropped, one empty on some ranks only keeps those ranks in
    the collective step with nothing to learn from.

    Returns:
        ``plan[k][r]``: positions in rank ``r``'s shard of mini-batch ``k``.
    """
    per_rank = []
    for n in shard_sizes:
        order = mini_batch_order(cfg, role, step, epoch, n, len(bounds))
        per_rank.append([order[lo:hi] for lo, hi in scaled_bounds(bounds, n)])
    plan = [list(slices) for slices in zip(*per_rank, strict=True)]
    return [slices for slices in plan if any(slices)]


def mini_batch_counts(
    shards: Sequence[Sequence[int]], per_rank: Sequence[Sequence[int]], lengths: Sequence[int]
) -> tuple[int, int]:
    """``(loss tokens, sequences with a loss token)`` of one mini-batch over every rank: the global counts that
    normalise its loss exactly. ``shards[r]``: the step's sample indices of rank r; ``per_rank[r]``: positions in
    that shard (one entry of :func:`rank_mini_batches`); ``lengths[i]``: loss tokens of sample i (the tokens of its
    loss mask, ``Experience.loss_tokens``; its response length when the mask has no holes)."""
    members = [lengths[shard[j]] for shard, local in zip(shards, per_rank, strict=True) for j in local]
    return sum(members), sum(1 for n in members if n > 0)


def scaled_bounds(bounds: Sequence[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """The config's mini-batch ranges (planned for the full rollout) for ``n`` samples (one rank's shard, or fewer
    samples than planned after dynamic sampling): the same number of ranges, some possibly empty."""
    total = bounds[-1][1] if bounds else 0
    if total == n:
        return list(bounds)
    return [(round(lo * n / total), round(hi * n / total)) for lo, hi in bounds]

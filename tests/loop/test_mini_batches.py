"""The mini-batch plan of a step: each rank's shard cut after dispatch, and the global counts that normalise each
mini-batch's loss."""

from __future__ import annotations

import types

import torch

from reasonrl.dataplane.experience import Experience
from reasonrl.loop.mini_batches import mini_batch_counts, mini_batch_order, rank_mini_batches


def test_rank_mini_batches_cut_each_shard_and_cover_every_sample_once_per_pass():
    cfg = types.SimpleNamespace(seed=0, shuffle_mini_batches=True)
    bounds = [(0, 16), (16, 32), (32, 48), (48, 64)]  # 4 mini-batches of a 64-sample rollout
    sizes = [22, 21, 21]
    plan = rank_mini_batches(cfg, "policy", 5, 0, sizes, bounds)
    assert len(plan) == 4 and all(len(per_rank) == 3 for per_rank in plan)
    for r, n in enumerate(sizes):  # each rank's slices are a partition of its shard
        assert sorted(j for per_rank in plan for j in per_rank[r]) == list(range(n))
        assert max(len(per_rank[r]) for per_rank in plan) - min(len(per_rank[r]) for per_rank in plan) <= 1
    assert plan == rank_mini_batches(cfg, "policy", 5, 0, sizes, bounds)  # a resumed run repeats it
    assert plan != rank_mini_batches(cfg, "policy", 5, 1, sizes, bounds)  # each pass its own order
    # no shuffle with the flag off or one mini-batch: contiguous slices in shard order
    off = types.SimpleNamespace(seed=0, shuffle_mini_batches=False)
    assert rank_mini_batches(off, "policy", 5, 0, [4, 4], [(0, 4), (4, 8)]) == [[[0, 1], [0, 1]], [[2, 3], [2, 3]]]
    assert rank_mini_batches(cfg, "policy", 5, 0, [3], [(0, 64)]) == [[[0, 1, 2]]]
    # fewer samples than ranks x mini-batches: empty slices on some ranks, a mini-batch empty everywhere dropped
    small = rank_mini_batches(off, "critic", 0, 0, [1, 1, 0], bounds)
    assert sum(len(s) for per_rank in small for s in per_rank) == 2 and all(any(per_rank) for per_rank in small)
    assert all(len(per_rank) == 3 for per_rank in small)


def test_one_rank_mini_batches_are_the_global_ones():
    """World size 1: the plan is the order of the padded path (``mini_batch_order`` cut by the bounds)."""
    cfg = types.SimpleNamespace(seed=3, shuffle_mini_batches=True)
    bounds = [(0, 10), (10, 20), (20, 30)]
    order = mini_batch_order(cfg, "policy", 2, 1, 30, 3)
    assert rank_mini_batches(cfg, "policy", 2, 1, [30], bounds) == [[order[lo:hi]] for lo, hi in bounds]


def test_global_counts_of_a_mini_batch_sum_the_ranks_slices():
    """The driver's counts of mini-batch k (union of the ranks' k-th slices) equal the padded path's counts."""
    g = torch.Generator().manual_seed(4)
    samples = [([1] * 3, [2] * (0 if i % 7 == 3 else int(torch.randint(1, 13, (1,), generator=g)))) for i in range(30)]
    lengths = torch.tensor([len(r) for _, r in samples])
    exp = Experience(samples, torch.arange(int(lengths.max()))[None, :] < lengths[:, None])
    parts = exp.shard_indices(4)
    shards = [exp.ragged(idx) for idx in parts]
    cfg = types.SimpleNamespace(seed=0, shuffle_mini_batches=True)
    plan = rank_mini_batches(cfg, "policy", 0, 0, [len(p) for p in parts], [(0, 15), (15, 30)])
    for per_rank in plan:
        members = [parts[r][j] for r, local in enumerate(per_rank) for j in local]
        local_counts = [
            shard.subset(local).num_tokens_and_seqs() for shard, local in zip(shards, per_rank, strict=True)
        ]
        assert tuple(map(sum, zip(*local_counts, strict=True))) == exp.select(members).num_tokens_and_seqs()
        lengths = [len(r) for _, r in exp.samples]
        assert mini_batch_counts(parts, per_rank, lengths) == exp.select(members).num_tokens_and_seqs()


def test_mini_batch_counts_skip_empty_responses_in_the_sequence_count():
    shards = [[0, 2], [1, 3]]  # rank 0 holds samples 0 and 2, rank 1 samples 1 and 3
    lengths = [5, 0, 3, 7]
    assert mini_batch_counts(shards, [[0, 1], [0]], lengths) == (8, 2)  # samples 0, 2 and the empty 1
    assert mini_batch_counts(shards, [[], [0, 1]], lengths) == (7, 1)
    assert mini_batch_counts(shards, [[], []], lengths) == (0, 0)

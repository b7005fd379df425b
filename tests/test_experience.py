"""Experience: slicing per rank and micro-batch, outcome rewards on the last token."""

from __future__ import annotations

import random

import pytest
import torch

from reasonrl.experience import Experience, padded_from_rows, token_balanced_shards


def make() -> Experience:
    samples = [([1, 2], [3, 4, 5]), ([6], [7]), ([8, 9, 10], [11, 12])]
    mask = padded_from_rows([[1] * len(r) for _, r in samples], 3).bool()
    adv = torch.arange(9, dtype=torch.float32).view(3, 3) * mask
    return Experience(samples, mask, old_logprobs=-adv, advantages=adv)


def test_padded_from_rows():
    out = padded_from_rows([[1.0, 2.0], [3.0]], 3)
    assert out.tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]


def test_select_cuts_to_the_longest_response_of_the_subset():
    sub = make().select([1, 2])
    assert sub.samples == [([6], [7]), ([8, 9, 10], [11, 12])]
    assert sub.action_mask.shape == (2, 2) and sub.advantages.tolist() == [[3.0, 0.0], [6.0, 7.0]]
    assert sub.ref_logprobs is None


def test_shard_covers_every_sample_once():
    exp = make()
    shards = exp.shard(2)
    assert [len(s) for s in shards] == [2, 1]
    assert [s for shard in shards for s in shard.samples] == exp.samples
    assert exp.num_tokens_and_seqs() == (6, 3)


def test_token_balanced_shards_partition_with_equal_counts_and_balanced_tokens():
    rng = random.Random(0)
    for _ in range(300):
        lengths = [rng.choice([rng.randint(5, 50), rng.randint(500, 4000)]) for _ in range(rng.randint(0, 64))]
        ranks = rng.randint(1, 8)
        shards = token_balanced_shards(lengths, ranks)
        assert len(shards) == ranks
        assert sorted(i for shard in shards for i in shard) == list(range(len(lengths)))  # a partition
        assert all(shard == sorted(shard) for shard in shards)  # batch order inside a rank
        sizes = [len(shard) for shard in shards]
        assert max(sizes) - min(sizes) <= 1
        loads = [sum(lengths[i] for i in shard) for shard in shards]
        if lengths:  # greedy longest-first: the busiest rank exceeds the mean by less than one sample
            assert max(loads) <= sum(lengths) / ranks + max(lengths)


def test_long_chains_of_thought_are_spread_over_ranks():
    """Contiguous halves would give one rank all four long samples (16 000 tokens against 40)."""
    lengths = [4000] * 4 + [10] * 4
    shards = token_balanced_shards(lengths, 2)
    assert [sum(lengths[i] for i in s) for s in shards] == [8020, 8020]
    assert shards == [[0, 2, 4, 6], [1, 3, 5, 7]]
    with pytest.raises(ValueError, match="num_shards"):
        token_balanced_shards(lengths, 0)

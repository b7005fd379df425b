"""Sharding: a batch cut over ranks, what travels, and the ranks' outputs put back in batch order."""

from __future__ import annotations

import pytest
import torch

from reasonrl.dataplane.experience import Experience, flatten_padded
from reasonrl.dataplane.sharding import RankShards, rank_shards


def make() -> Experience:
    samples = [([1, 2], [3, 4, 5]), ([6], [7]), ([8, 9, 10], [11, 12]), ([13], [14, 15, 16])]
    lengths = torch.tensor([len(r) for _, r in samples])
    mask = torch.arange(3)[None, :] < lengths[:, None]
    values = torch.arange(12, dtype=torch.float32).view(4, 3) * mask
    return Experience(samples, mask, old_logprobs=values)


def test_rank_shards_put_once_and_stitch_back_in_batch_order():
    exp = make()
    put_calls = []

    def put(items):
        put_calls.append(len(items))
        return [("ref", i) for i in range(len(items))]

    shards = rank_shards(exp, 2, with_fields=False, put=put)
    assert put_calls == [2] and shards.payloads == [("ref", 0), ("ref", 1)]
    assert sorted(i for idx in shards.indices for i in idx) == [0, 1, 2, 3]
    assert shards.world_size == 2 and shards.sizes() == [2, 2] and shards.width == 3
    # each rank answers with the flat values of its own samples, in its shard's order
    parts = [flatten_padded(exp.old_logprobs[idx], shards.lengths[idx]) for idx in shards.indices]
    assert torch.equal(shards.stitch(parts), exp.old_logprobs)


def test_payloads_carry_the_fields_only_when_asked():
    exp = make()
    bare = rank_shards(exp, 1, with_fields=False).payloads[0]
    full = rank_shards(exp, 1, with_fields=True).payloads[0]
    assert bare.fields == {} and set(full.fields) == {"old_logprobs"}


def test_stitch_refuses_outputs_that_do_not_match_the_shards():
    shards = RankShards([[0], [1]], [None, None], torch.tensor([2, 1]), 2)
    with pytest.raises(ValueError, match="1 outputs for 2 ranks"):
        shards.stitch([torch.zeros(2)])
    with pytest.raises(ValueError, match="rank 1: 2 output values for 1 response tokens"):
        shards.stitch([torch.zeros(2), torch.zeros(2)])
    assert shards.stitch([torch.ones(2), torch.ones(1)]).tolist() == [[1.0, 1.0], [1.0, 0.0]]

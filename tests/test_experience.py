"""Experience: slicing per rank and micro-batch, outcome rewards on the last token."""

from __future__ import annotations

import torch

from reasonrl.experience import Experience, padded_from_rows


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

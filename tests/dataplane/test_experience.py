"""Experience: slicing per rank and micro-batch, the ragged wire format."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from reasonrl.dataplane.experience import (
    FLOAT_FIELDS,
    Experience,
    RaggedShard,
    flatten_padded,
    padded_from_flat,
    token_balanced_shards,
)


def padded_from_rows(rows, width: int) -> torch.Tensor:
    """List of per-sample lists -> right-padded [batch, width] float tensor."""
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row)[:width], dtype=torch.float32)
    return out


def payload_bytes(shard) -> int:
    """Bytes of a RaggedShard's tensors (what serialisation costs, up to a small constant)."""
    tensors = [shard.tokens, shard.prompt_lengths, shard.response_lengths, *shard.fields.values()]
    return sum(t.numel() * t.element_size() for t in tensors)


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


def random_experience(n: int, seed: int = 0, with_empty: bool = True) -> Experience:
    """Random prompts / responses (some empty responses) with every per-token field, zeros at padding."""
    g = torch.Generator().manual_seed(seed)
    samples = []
    for i in range(n):
        p_len = int(torch.randint(1, 9, (1,), generator=g))
        r_len = 0 if with_empty and i % 7 == 3 else int(torch.randint(1, 13, (1,), generator=g))
        samples.append(
            (
                torch.randint(0, 50_000, (p_len,), generator=g).tolist(),
                torch.randint(0, 9, (r_len,), generator=g).tolist(),
            )
        )
    width = max(len(r) for _, r in samples)
    mask = padded_from_rows([[1] * len(r) for _, r in samples], width).bool()
    fields = {name: torch.randn(n, width, generator=g) * mask for name in FLOAT_FIELDS}
    return Experience(samples, mask, **fields)


def assert_same(a: Experience, b: Experience) -> None:
    assert a.samples == b.samples
    assert torch.equal(a.action_mask, b.action_mask)
    for name in FLOAT_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None and y is None) or torch.equal(x, y), name


def test_ragged_round_trip_is_exact():
    exp = random_experience(23)
    shard = exp.ragged()
    assert shard.tokens.dtype == torch.int32 and shard.prompt_lengths.dtype == torch.int32
    assert all(v.dtype == torch.float32 and v.dim() == 1 for v in shard.fields.values())
    assert shard.fields["advantages"].numel() == int(exp.action_mask.sum())  # response tokens only, no padding
    assert_same(shard.to_experience(), exp)
    # a sub-batch: the same as the padded path's select, with or without a given width
    idx = [20, 3, 0, 11]
    assert_same(shard.select(idx), exp.select(idx))
    assert_same(shard.select(idx, width=5), exp.select(idx, width=5))
    assert_same(shard.subset(idx).to_experience(), exp.select(idx))
    # token ids only (the forward passes), and an empty selection (a rank with no sample in a mini-batch)
    tokens_only = exp.ragged(with_fields=False)
    assert tokens_only.fields == {} and tokens_only.samples == exp.samples
    assert tokens_only.to_experience().advantages is None
    empty = shard.subset([])
    assert len(empty) == 0 and empty.samples == [] and empty.num_tokens_and_seqs() == (0, 0)
    assert empty.to_experience().action_mask.shape == (0, 0)


def test_flat_and_padded_are_inverse():
    lengths = torch.tensor([3, 0, 1])
    padded = torch.tensor([[1.0, 2.0, 3.0, 9.0], [9.0, 9.0, 9.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
    flat = flatten_padded(padded, lengths)
    assert flat.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert padded_from_flat(flat, lengths, 4).tolist() == [[1, 2, 3, 0], [0, 0, 0, 0], [4, 0, 0, 0]]
    assert padded_from_flat(flat, lengths, 2).tolist() == [[1, 2], [0, 0], [4, 0]]  # cut like select(width)
    with pytest.raises(ValueError, match="expected"):
        RaggedShard.from_samples([([1], [2, 3])], {"advantages": torch.zeros(3)})


def test_ragged_shards_partition_the_step_and_keep_its_counts():
    exp = random_experience(40, seed=1)
    parts = exp.shard_indices(3)
    shards = [exp.ragged(idx) for idx in parts]
    assert [s for shard in shards for s in shard.samples] == [exp.samples[i] for idx in parts for i in idx]
    tokens, seqs = zip(*(s.num_tokens_and_seqs() for s in shards), strict=True)
    assert (sum(tokens), sum(seqs)) == exp.num_tokens_and_seqs()
    for idx, shard in zip(parts, shards, strict=True):
        assert_same(shard.to_experience(exp.action_mask.shape[1]), exp.select(idx, exp.action_mask.shape[1]))


def test_ragged_shard_is_several_times_smaller_than_the_dense_one():
    """Long-tailed responses: most rows are mostly padding in the dense [n, T] float32 layout."""
    import pickle

    samples = [([1] * 300, [2] * (8000 if i == 0 else 500)) for i in range(64)]
    width = 8000
    mask = padded_from_rows([[1] * len(r) for _, r in samples], width).bool()
    fields = {name: torch.ones(64, width) * mask for name in FLOAT_FIELDS}
    exp = Experience(samples, mask, **fields)
    dense = len(pickle.dumps(exp))
    ragged = len(pickle.dumps(exp.ragged()))
    assert payload_bytes(exp.ragged()) <= ragged < payload_bytes(exp.ragged()) + 4096  # the payload is the tensors
    assert ragged * 5 < dense, (ragged, dense)


# ------------------------------------------------------------------------------ loss masks with holes
def with_holes(exp: Experience, seed: int = 0) -> Experience:
    """``exp`` with a loss mask that has holes inside the responses (tool output: masked spans of 1-3 tokens), a
    response whose every token is masked, and a response masked at its end; fields keep their values on the whole
    response span (the forwards compute them everywhere), zeros past it."""
    g = torch.Generator().manual_seed(seed)
    mask = exp.action_mask.clone()
    for i, (_, response) in enumerate(exp.samples):
        if len(response) >= 4:
            start = int(torch.randint(1, len(response) - 2, (1,), generator=g))
            mask[i, start : start + int(torch.randint(1, 3, (1,), generator=g))] = False
    non_empty = [i for i, (_, r) in enumerate(exp.samples) if r]
    mask[non_empty[0]] = False  # every token of this response is masked: no loss token, not a sequence
    mask[non_empty[1], len(exp.samples[non_empty[1]][1]) - 1] = False  # masked at the end of its response
    return dataclasses.replace(exp, action_mask=mask)


def test_a_loss_mask_without_holes_travels_as_none_and_comes_back_as_the_prefix_mask():
    """Today's data (no holes): nothing more on the wire, and every count and mask exactly as before."""
    exp = random_experience(23)
    shard = exp.ragged()
    assert shard.loss_mask is None
    lengths = torch.tensor([len(r) for _, r in exp.samples])
    prefix = torch.arange(exp.action_mask.shape[1])[None, :] < lengths[:, None]  # the mask the wire implied before
    assert torch.equal(shard.to_experience().action_mask, prefix)
    assert exp.loss_tokens() == lengths.tolist() and shard.loss_tokens().tolist() == lengths.tolist()
    assert shard.num_tokens_and_seqs() == (int(lengths.sum()), int((lengths > 0).sum()))


def test_ragged_round_trip_keeps_a_loss_mask_with_holes():
    exp = with_holes(random_experience(23))
    span = int(sum(len(r) for _, r in exp.samples))
    assert int(exp.action_mask.sum()) < span  # there are holes
    shard = exp.ragged()
    assert shard.loss_mask.dtype == torch.bool and shard.loss_mask.shape == (span,)
    assert shard.fields["advantages"].numel() == span  # fields cover the whole response span, holes included
    assert_same(shard.to_experience(), exp)
    idx = [20, 3, 0, 11, 1]
    assert_same(shard.select(idx), exp.select(idx))
    assert_same(shard.select(idx, width=5), exp.select(idx, width=5))
    assert_same(shard.subset(idx).to_experience(), exp.select(idx))
    assert shard.loss_tokens().tolist() == exp.loss_tokens()
    assert shard.num_tokens_and_seqs() == exp.num_tokens_and_seqs()
    tokens, seqs = exp.num_tokens_and_seqs()
    assert tokens == int(exp.action_mask.sum()) and seqs == sum(1 for n in exp.loss_tokens() if n > 0)
    assert seqs < sum(1 for _, r in exp.samples if r)  # a response with no loss token is no sequence
    assert exp.ragged(with_fields=False).loss_mask is None  # the forwards run over the whole span


def test_ragged_shards_with_holes_partition_the_step_and_keep_its_counts():
    exp = with_holes(random_experience(40, seed=1), seed=1)
    parts = exp.shard_indices(3)
    shards = [exp.ragged(idx) for idx in parts]
    tokens, seqs = zip(*(s.num_tokens_and_seqs() for s in shards), strict=True)
    assert (sum(tokens), sum(seqs)) == exp.num_tokens_and_seqs()
    for idx, shard in zip(parts, shards, strict=True):
        assert_same(shard.to_experience(exp.action_mask.shape[1]), exp.select(idx, exp.action_mask.shape[1]))


def test_a_loss_mask_past_the_response_is_refused():
    exp = random_experience(5, with_empty=False)
    short = min(range(5), key=lambda i: len(exp.samples[i][1]))
    mask = exp.action_mask.clone()
    mask[short, len(exp.samples[short][1]) :] = True
    if len(exp.samples[short][1]) == mask.shape[1]:
        pytest.skip("no padding in this draw")
    with pytest.raises(ValueError, match=rf"past the response of rows \[{short}\]"):
        dataclasses.replace(exp, action_mask=mask).ragged()
    with pytest.raises(ValueError, match="loss_mask: shape"):
        RaggedShard.from_samples([([1], [2, 3])], {}, torch.ones(3, dtype=torch.bool))

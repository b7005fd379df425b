"""Padded / packed layouts of (prompt, response) pairs and micro-batch splitting."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from reasonrl.models.batching import (
    PackedBatch,
    PaddedBatch,
    action_mask_from_lens,
    pack_batch,
    pad_batch,
    padded_grid_cells,
    padded_grid_tokens,
    plan_micro_batches,
    scatter_to_padded,
    split_by_token_budget,
    split_fixed,
    supports_packing,
)

PAD = 0
SAMPLES = [([11, 12, 13], [21, 22]), ([14], [23, 24, 25, 26]), ([15, 16], [])]


def test_pad_batch_layout():
    b = pad_batch(SAMPLES, PAD)
    assert isinstance(b, PaddedBatch)
    assert b.prompt_width == 3 and b.num_actions == 4  # P = 3, T = 4
    assert b.input_ids.tolist() == [
        [11, 12, 13, 21, 22, PAD, PAD],
        [PAD, PAD, 14, 23, 24, 25, 26],
        [PAD, 15, 16, PAD, PAD, PAD, PAD],
    ]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1], [0, 1, 1, 0, 0, 0, 0]]
    # real tokens are numbered 0, 1, 2, ... as in the unpadded sequence; padding is clipped to >= 0
    for row, mask in zip(b.position_ids.tolist(), b.attention_mask.tolist(), strict=True):
        assert [p for p, m in zip(row, mask, strict=True) if m] == list(range(sum(mask)))
        assert min(row) >= 0
    assert b.action_mask.dtype == torch.bool
    assert b.action_mask.tolist() == [[True, True, False, False], [True] * 4, [False] * 4]
    assert b.prompt_lens == [3, 1, 2] and b.response_lens == [2, 4, 0]
    assert b.response_ids()[b.action_mask].tolist() == [21, 22, 23, 24, 25, 26]


def test_padded_response_slice_is_the_predicting_column():
    b = pad_batch(SAMPLES, PAD)
    per_position = b.input_ids.unsqueeze(-1)  # [batch, S, 1]: "output" = token at that column
    predictors = b.response_slice(per_position)[..., 0]  # [batch, T]
    # the column that predicts response token t holds the token just before it
    assert predictors[0, :2].tolist() == [13, 21] and predictors[1].tolist() == [14, 23, 24, 25]


def test_pack_batch_layout_and_mapping_back():
    b = pack_batch(SAMPLES)
    assert isinstance(b, PackedBatch) and b.attention_mask is None
    assert b.input_ids.tolist() == [[11, 12, 13, 21, 22, 14, 23, 24, 25, 26, 15, 16]]
    assert b.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]]
    assert b.cu_seqlens.tolist() == [0, 5, 10, 12] and b.cu_seqlens.dtype == torch.int32
    assert b.seq_lens == [5, 5, 2] and b.num_actions == 4
    assert b.response_positions.tolist() == [2, 3, 5, 6, 7, 8]
    assert b.response_ids().tolist() == [21, 22, 23, 24, 25, 26]
    grid = scatter_to_padded(b.response_ids(), b.action_mask)
    assert grid.tolist() == pad_batch(SAMPLES, PAD).response_ids().masked_fill(~b.action_mask, 0).tolist()


def test_scatter_to_padded_inverts_masked_select_and_is_differentiable():
    mask = action_mask_from_lens([3, 0, 1])
    flat = torch.arange(4.0, requires_grad=True)
    grid = scatter_to_padded(flat, mask)  # [3, 3]
    assert grid.tolist() == [[0, 1, 2], [0, 0, 0], [3, 0, 0]]
    assert torch.equal(grid[mask], flat)
    grid.sum().backward()
    assert flat.grad.tolist() == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        scatter_to_padded(torch.zeros(5), mask)


def test_invalid_samples():
    with pytest.raises(ValueError, match="empty prompt"):
        pad_batch([([], [1, 2])], PAD)
    with pytest.raises(ValueError, match="empty prompt"):
        pack_batch([([1], [2]), ([], [3])])
    with pytest.raises(ValueError):
        pad_batch([], PAD)


def test_to_device_keeps_metadata():
    for b in (pad_batch(SAMPLES, PAD), pack_batch(SAMPLES)):
        moved = b.to("cpu")
        assert type(moved) is type(b) and moved.response_lens == b.response_lens
        assert torch.equal(moved.input_ids, b.input_ids)


def test_supports_packing():
    assert supports_packing("flash_attention_2") and supports_packing("flash_attention_3")
    # transformers >= 4.5x turns position-id resets into a block-diagonal mask for these (checked numerically in
    # test_models_logprobs.py::test_packed_matches_naive)
    assert supports_packing("sdpa") and supports_packing("eager")
    assert not supports_packing("paged_attention") and not supports_packing(None)


def test_split_by_token_budget_basic():
    assert split_by_token_budget([3, 4, 2, 5, 1], 7) == [[0, 1], [2, 3], [4]]
    # a sample over the budget gets its own micro-batch, wherever it is
    assert split_by_token_budget([2, 20, 2, 2], 5) == [[0], [1], [2, 3]]
    assert split_by_token_budget([], 5) == []
    # padded cost = count * max length
    assert split_by_token_budget([2, 4, 1, 1], 8, padded=True) == [[0, 1], [2, 3]]
    assert split_by_token_budget([2, 4, 1, 1], 8) == [[0, 1, 2, 3]]
    assert split_by_token_budget([2, 4, 1, 1], 7) == [[0, 1, 2], [3]]
    with pytest.raises(ValueError):
        split_by_token_budget([1], 0)
    with pytest.raises(ValueError):
        split_by_token_budget([-1], 4)
    with pytest.raises(ValueError, match="prompt_lengths has 1 entries for 2"):
        split_by_token_budget([3, 3], 4, padded=True, prompt_lengths=[1])


def test_padded_budget_counts_the_grid_pad_batch_builds():
    """A long prompt with a short answer next to a short prompt with a long answer: 11 tokens each, but the
    padded grid is [2, 10 + 10] (left-padded prompts, right-padded responses). Planning with max(length) would
    put both in one micro-batch of 40 real grid cells under a budget of 30."""
    samples = [([1] * 10, [2]), ([1], [2] * 10)]
    lengths, prompts = [11, 11], [10, 1]
    assert split_by_token_budget(lengths, 30, padded=True) == [[0, 1]]  # the old estimate: 2 * 11 = 22
    planned = split_by_token_budget(lengths, 30, padded=True, prompt_lengths=prompts)
    assert planned == [[0], [1]]
    for mb in planned:  # what really runs fits the budget
        assert pad_batch([samples[i] for i in mb], 0).input_ids.numel() <= 30
    assert padded_grid_tokens(samples) == pad_batch(samples, 0).input_ids.numel() == 40
    assert padded_grid_cells([0, 1], lengths, prompts) == 40
    assert padded_grid_tokens([]) == 0


def random_draws(seed: int, count: int = 200):
    """``count`` random (lengths, budget, prompt lengths) draws for the planners' property tests."""
    rng = random.Random(seed)
    for _ in range(count):
        lengths = [rng.randint(0, 30) for _ in range(rng.randint(1, 40))]
        budget = rng.randint(1, 60)
        yield lengths, budget, [rng.randint(1, n) if n else 0 for n in lengths]


@pytest.mark.parametrize("padded", [False, True])
def test_split_by_token_budget_properties(padded):
    for lengths, budget, prompts in random_draws(0):
        batches = split_by_token_budget(lengths, budget, padded=padded, prompt_lengths=prompts)
        assert [i for mb in batches for i in mb] == list(range(len(lengths)))  # order kept, nothing lost

        def cost(mb: list[int], lengths=lengths, prompts=prompts) -> int:
            return padded_grid_cells(mb, lengths, prompts) if padded else sum(lengths[i] for i in mb)

        for mb in batches:
            assert cost(mb) <= budget or len(mb) == 1
        for prev, nxt in itertools.pairwise(batches):  # greedy: the next sample did not fit
            assert cost(prev + [nxt[0]]) > budget


@pytest.mark.parametrize("padded", [False, True])
def test_plan_micro_batches_properties(padded):
    """Every sample once; each micro-batch within the budget (or a lone sample); packed keeps batch order; padded
    either groups by length (indices ascending inside a group, no group's shortest sample shorter than an earlier
    group's longest) or, where grouping would need more micro-batches or more cells, keeps batch order; never
    more micro-batches than batch order."""
    for lengths, budget, prompts in random_draws(1):
        batches = plan_micro_batches(lengths, budget, padded=padded, prompt_lengths=prompts)
        assert sorted(i for mb in batches for i in mb) == list(range(len(lengths)))
        if not padded:
            assert batches == split_by_token_budget(lengths, budget)
            continue
        in_order = split_by_token_budget(lengths, budget, padded=True, prompt_lengths=prompts)
        assert len(batches) <= len(in_order)
        for mb in batches:
            assert mb == sorted(mb)
            assert padded_grid_cells(mb, lengths, prompts) <= budget or len(mb) == 1
        if batches != in_order:
            for prev, nxt in itertools.pairwise(batches):
                assert max(lengths[i] for i in prev) <= min(lengths[i] for i in nxt)


def test_padded_plan_keeps_batch_order_where_grouping_by_length_needs_more_micro_batches():
    """Sorting by total length can interleave long prompts with long responses: here grouping would cut 4
    micro-batches where batch order needs 2, so batch order is kept."""
    lengths, prompts = [25, 34, 30, 37], [19, 18, 2, 6]
    in_order = split_by_token_budget(lengths, 80, padded=True, prompt_lengths=prompts)
    assert len(in_order) == 2
    assert plan_micro_batches(lengths, 80, padded=True, prompt_lengths=prompts) == in_order


def test_padded_plan_groups_long_tailed_lengths_into_fewer_cells():
    """Response lengths drawn lognormal (median 48, sigma 1, at most 384; bench_async's workload) behind 64-token
    prompts: grouped by length the padded grids hold far fewer cells than in batch order, in fewer micro-batches;
    a batch that fits one micro-batch is planned as before."""
    rng = random.Random(0)
    samples = [([1] * 64, [2] * min(384, max(1, round(rng.lognormvariate(math.log(48), 1.0))))) for _ in range(64)]
    lengths, prompts = [len(p) + len(r) for p, r in samples], [len(p) for p, _ in samples]

    def cells(batches):
        return sum(padded_grid_tokens([samples[i] for i in mb]) for mb in batches)

    in_order = split_by_token_budget(lengths, 4096, padded=True, prompt_lengths=prompts)
    grouped = plan_micro_batches(lengths, 4096, padded=True, prompt_lengths=prompts)
    assert cells(grouped) < 0.75 * cells(in_order) and len(grouped) < len(in_order)
    assert plan_micro_batches(lengths, 10**6, padded=True, prompt_lengths=prompts) == [list(range(64))]


def test_split_fixed():
    assert split_fixed(5, 2) == [[0, 1], [2, 3], [4]]
    assert split_fixed(0, 3) == []
    with pytest.raises(ValueError):
        split_fixed(3, 0)

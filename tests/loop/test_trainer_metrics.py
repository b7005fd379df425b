"""Pure helpers of the trainer: metric averaging over ranks and optimizer steps, per-rank outputs placed back in
batch order, the mini-batch order of each pass."""

from __future__ import annotations

import types

import pytest
import torch

from reasonrl.dataplane.sharding import stitch_rank_outputs
from reasonrl.loop.mini_batches import mini_batch_order
from reasonrl.loop.updates import mean_metrics


def test_token_weighted_over_ranks_and_mean_over_steps():
    step1 = [{"clipfrac": 0.0, "tokens": 30, "lr": 1.0}, {"clipfrac": 1.0, "tokens": 10, "lr": 1.0}]
    step2 = [{"clipfrac": 0.5, "tokens": 5, "lr": 2.0}, {"clipfrac": 0.5, "tokens": 5, "lr": 2.0}]
    out = mean_metrics([step1, step2])
    assert out["clipfrac"] == pytest.approx((0.25 + 0.5) / 2)
    assert out["lr"] == pytest.approx(1.5)


def test_a_rank_with_an_empty_shard_does_not_bias_or_crash():
    empty = {"grad_norm": 2.0, "lr": 1.0, "tokens": 0, "loss_share": 0.0}
    full = {"entropy": 3.0, "grad_norm": 2.0, "lr": 1.0, "tokens": 12, "loss_share": 0.5}
    for ranks in ([full, empty], [empty, full]):
        out = mean_metrics([ranks])
        assert out["entropy"] == pytest.approx(3.0) and out["grad_norm"] == 2.0
    # a key present in only one of two steps is averaged over that step only
    out = mean_metrics([[full, empty], [empty, empty]])
    assert out["entropy"] == pytest.approx(3.0)


def test_stitch_places_each_ranks_flat_outputs_at_its_shard_rows():
    parts = [torch.tensor([1.0, 1.0, 3.0]), torch.tensor([2.0]), torch.zeros(0)]  # per rank: response tokens only
    out = stitch_rank_outputs(parts, torch.tensor([2, 1, 1]), 3, [[0, 2], [1], []])
    assert out.tolist() == [[1.0, 1.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0]]


def test_mini_batch_order_is_a_seeded_permutation_per_pass():
    cfg = types.SimpleNamespace(seed=0, shuffle_mini_batches=True)
    first = mini_batch_order(cfg, "policy", 3, 0, 64, 4)
    assert sorted(first) == list(range(64)) and first != list(range(64))
    assert first == mini_batch_order(cfg, "policy", 3, 0, 64, 4)  # the same after a resume
    assert first != mini_batch_order(cfg, "policy", 3, 1, 64, 4)  # each pass its own order
    assert first != mini_batch_order(cfg, "critic", 3, 0, 64, 4)
    assert first != mini_batch_order(cfg, "policy", 4, 0, 64, 4)
    assert mini_batch_order(cfg, "policy", 3, 0, 64, 1) == list(range(64))  # one mini-batch: nothing to shuffle
    off = types.SimpleNamespace(seed=0, shuffle_mini_batches=False)
    assert mini_batch_order(off, "policy", 3, 0, 64, 4) == list(range(64))

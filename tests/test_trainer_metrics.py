"""Pure helpers of the trainer: metric averaging over ranks and optimizer steps."""

from __future__ import annotations

import pytest

from reasonrl.trainer import _mean_metrics


def test_token_weighted_over_ranks_and_mean_over_steps():
    step1 = [{"clipfrac": 0.0, "tokens": 30, "lr": 1.0}, {"clipfrac": 1.0, "tokens": 10, "lr": 1.0}]
    step2 = [{"clipfrac": 0.5, "tokens": 5, "lr": 2.0}, {"clipfrac": 0.5, "tokens": 5, "lr": 2.0}]
    out = _mean_metrics([step1, step2])
    assert out["clipfrac"] == pytest.approx((0.25 + 0.5) / 2)
    assert out["lr"] == pytest.approx(1.5)


def test_a_rank_with_an_empty_shard_does_not_bias_or_crash():
    empty = {"grad_norm": 2.0, "lr": 1.0, "tokens": 0, "loss_share": 0.0}
    full = {"entropy": 3.0, "grad_norm": 2.0, "lr": 1.0, "tokens": 12, "loss_share": 0.5}
    for ranks in ([full, empty], [empty, full]):
        out = _mean_metrics([ranks])
        assert out["entropy"] == pytest.approx(3.0) and out["grad_norm"] == 2.0
    # a key present in only one of two steps is averaged over that step only
    out = _mean_metrics([[full, empty], [empty, empty]])
    assert out["entropy"] == pytest.approx(3.0)

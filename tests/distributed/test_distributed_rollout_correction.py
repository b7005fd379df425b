"""The policy worker's rollout-policy correction of one micro-batch (``ppo_workers._rollout_correction``): which
weights reach the loss and which metrics are logged, per ``rollout_correction`` setting. Pure logic, no Ray."""

from __future__ import annotations

import math

import pytest
import torch

from reasonrl.algos.loss_settings import PolicyLossConfig
from reasonrl.distributed.ppo_workers import _rollout_correction

OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 0.0]])  # trainer log-probs [batch, T]; row 1 has 2 tokens
ROLLOUT = torch.tensor([[-1.5, -1.0, -0.5], [-0.3, -0.2, 0.0]])  # engine log-probs of the same tokens
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])


def correction(mode: str, **kw):
    return _rollout_correction(PolicyLossConfig(rollout_correction=mode, **kw), OLD, ROLLOUT, MASK)


def test_off_adds_nothing():
    assert correction("off") == (None, {})


def test_monitor_logs_the_mismatch_and_keeps_the_loss_unweighted():
    weights, metrics = correction("monitor")
    assert weights is None
    ratios = [math.exp(0.5), math.exp(-1.0), 1.0, 1.0, math.exp(-0.5)]  # the 5 valid tokens
    assert metrics["rollout_corr/ratio_mean"] == pytest.approx(sum(ratios) / 5)
    assert metrics["rollout_corr/ratio_max"] == pytest.approx(max(ratios))
    k3 = sum(r - 1 - math.log(r) for r in ratios) / 5  # KL(rollout || trainer), k3
    assert metrics["rollout_corr/kl_k3"] == pytest.approx(k3)


def test_token_tis_weights_reach_the_loss():
    weights, metrics = correction("token_tis", rollout_correction_cap=1.2)
    expected = torch.tensor([[1.2, math.exp(-1.0), 1.0], [1.0, math.exp(-0.5), 0.0]])
    torch.testing.assert_close(weights, expected)
    assert metrics["rollout_corr/truncated_token_frac"] == pytest.approx(1 / 5)


def test_seq_mis_drops_a_sequence_outside_the_bounds():
    weights, metrics = correction("seq_mis", rollout_correction_lower=0.7, rollout_correction_upper=1.5)
    # row 0: sum log-ratio = 0.5 - 1.0 = -0.5 -> ratio 0.61 < 0.7: dropped; row 1: -0.5 -> also dropped
    assert torch.equal(weights, torch.zeros(2, 3))
    assert metrics["rollout_corr/masked_seq_frac"] == 1.0


def test_a_correction_without_engine_logprobs_is_refused():
    with pytest.raises(ValueError, match="needs the engines' log-probs"):
        _rollout_correction(PolicyLossConfig(rollout_correction="token_tis"), OLD, None, MASK)

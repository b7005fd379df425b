"""Rollout-policy correction (TIS / MIS between rollout-engine and trainer log-probs): each mode against its formula
computed independently with python math, padding, no gradient, overflow safety, metrics."""

import math

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import (
    ROLLOUT_CORRECTION_MODES,
    check_rollout_correction_mode,
    rollout_correction,
    rollout_correction_metrics,
    rollout_log_ratio,
)

# 2 x 3 example; the last token of row 1 is padding (its log-probs are garbage on purpose).
OLD = [[-1.0, -2.0, -0.5], [-0.3, -1.2, 0.0]]
ROLLOUT = [[-1.2, -1.5, -0.5], [-0.1, -1.0, -7.0]]
MASK = [[1, 1, 1], [1, 1, 0]]


def _tensors():
    return torch.tensor(OLD), torch.tensor(ROLLOUT), torch.tensor(MASK)


def _log_ratios():
    """Per-token log rho = old - rollout of the VALID tokens, per row (python floats)."""
    return [
        [o - r for o, r, m in zip(orow, rrow, mrow, strict=True) if m]
        for orow, rrow, mrow in zip(OLD, ROLLOUT, MASK, strict=True)
    ]


def _to_matrix(rows):
    """Pad python rows of valid-token values with 0 to the [2, 3] shape of the example."""
    return torch.tensor([row + [0.0] * (3 - len(row)) for row in rows])


def _keep_matrix(rows):
    return torch.tensor([row + [False] * (3 - len(row)) for row in rows])


def test_log_ratio_is_old_minus_rollout_and_zero_on_padding():
    old, rollout, mask = _tensors()
    assert_close(rollout_log_ratio(old, rollout, mask), _to_matrix(_log_ratios()))


def test_mode_none_gives_ones_on_valid_tokens_and_still_measures():
    old, rollout, mask = _tensors()
    weights, keep, metrics = rollout_correction(old, rollout, mask, "none")
    assert_close(weights, mask.float())
    assert torch.equal(keep, mask.bool())
    assert metrics["rollout_corr/kl_k3"] > 0  # the mismatch is measured even when nothing is corrected


def test_token_tis():
    cap = 1.1
    expected = _to_matrix([[min(math.exp(lr), cap) for lr in row] for row in _log_ratios()])
    weights, keep, _ = rollout_correction(*_tensors(), mode="token_tis", cap=cap)
    assert_close(weights, expected)
    assert torch.equal(keep, torch.tensor(MASK).bool())
    assert weights.max().item() == pytest.approx(cap)  # the 0.2 log ratio (rho = 1.22) was truncated


def test_seq_tis():
    cap = 0.72  # row 0: exp(-0.3) = 0.741 -> truncated to 0.72; row 1: exp(-0.4) = 0.670 kept as is
    expected = _to_matrix([[min(math.exp(sum(row)), cap)] * len(row) for row in _log_ratios()])
    weights, keep, _ = rollout_correction(*_tensors(), mode="seq_tis", cap=cap)
    assert_close(weights, expected)
    assert torch.equal(keep, torch.tensor(MASK).bool())


def test_token_mis_with_ratio_weights_and_with_unit_weights():
    lower, upper = 0.7, 1.2  # rho = 1.22 and 0.61 fall outside, 1.0 and 0.82 stay
    keep_rows = [[lower <= math.exp(lr) <= upper for lr in row] for row in _log_ratios()]
    ratio_rows = [
        [math.exp(lr) if k else 0.0 for lr, k in zip(row, krow, strict=True)]
        for row, krow in zip(_log_ratios(), keep_rows, strict=True)
    ]
    weights, keep, metrics = rollout_correction(*_tensors(), mode="token_mis", lower=lower, upper=upper)
    assert_close(weights, _to_matrix(ratio_rows))
    assert torch.equal(keep, _keep_matrix(keep_rows))
    assert metrics["rollout_corr/masked_token_frac"] == pytest.approx(2 / 5)
    assert metrics["rollout_corr/masked_seq_frac"] == pytest.approx(1 / 2)

    unit_weights, unit_keep, _ = rollout_correction(
        *_tensors(), mode="token_mis", lower=lower, upper=upper, mis_reweight=False
    )
    assert_close(unit_weights, _keep_matrix(keep_rows).float())
    assert torch.equal(unit_keep, keep)


def test_seq_mis_drops_whole_sequences():
    lower, upper = 0.7, 1.5  # row 0: exp(-0.3) = 0.741 kept; row 1: exp(-0.4) = 0.670 dropped
    rows = _log_ratios()
    keep_rows = [[lower <= math.exp(sum(row)) <= upper] * len(row) for row in rows]
    weight_rows = [[math.exp(sum(row)) if k else 0.0 for k in krow] for row, krow in zip(rows, keep_rows, strict=True)]
    weights, keep, metrics = rollout_correction(*_tensors(), mode="seq_mis", lower=lower, upper=upper)
    assert keep_rows[0][0] and not keep_rows[1][0]
    assert_close(weights, _to_matrix(weight_rows))
    assert torch.equal(keep, _keep_matrix(keep_rows))
    assert metrics["rollout_corr/masked_seq_frac"] == pytest.approx(1 / 2)
    assert metrics["rollout_corr/masked_token_frac"] == pytest.approx(2 / 5)


def test_geo_mis_uses_the_geometric_mean_and_unit_weights():
    lower, upper = 0.85, 1.2  # row 0: exp(-0.3 / 3) = 0.905 kept; row 1: exp(-0.4 / 2) = 0.819 dropped
    rows = _log_ratios()
    keep_rows = [[lower <= math.exp(sum(row) / len(row)) <= upper] * len(row) for row in rows]
    weights, keep, _ = rollout_correction(*_tensors(), mode="geo_mis", lower=lower, upper=upper)
    assert keep_rows[0][0] and not keep_rows[1][0]
    assert_close(weights, _keep_matrix(keep_rows).float())
    assert torch.equal(keep, _keep_matrix(keep_rows))


def test_default_bounds_are_cap_and_its_reciprocal():
    # rho = 1.22 > 1.2 = U and rho = 0.61 < 1 / 1.2 = L are masked
    _, keep, _ = rollout_correction(*_tensors(), mode="token_mis", cap=1.2)
    expected = [[1 / 1.2 <= math.exp(lr) <= 1.2 for lr in row] for row in _log_ratios()]
    assert torch.equal(keep, _keep_matrix(expected))


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTION_MODES)
def test_identical_logprobs_give_unit_weights_and_zero_kl(mode):
    old, _, mask = _tensors()
    weights, keep, metrics = rollout_correction(old, old.clone(), mask, mode, cap=1.5, lower=0.999, upper=1.001)
    assert_close(weights, mask.float())
    assert torch.equal(keep, mask.bool())
    assert metrics["rollout_corr/kl_k1"] == 0.0
    assert metrics["rollout_corr/kl_k3"] == 0.0
    assert metrics["rollout_corr/chi2_token"] == pytest.approx(0.0, abs=1e-7)
    assert metrics["rollout_corr/ratio_mean"] == pytest.approx(1.0)
    assert metrics["rollout_corr/ess"] == pytest.approx(1.0)
    assert metrics["rollout_corr/masked_token_frac"] == 0.0
    assert metrics["rollout_corr/truncated_token_frac"] == 0.0


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTION_MODES)
def test_padding_values_change_nothing(mode):
    old, rollout, mask = _tensors()
    weights, keep, metrics = rollout_correction(old, rollout, mask, mode, cap=1.1, lower=0.7, upper=1.5)
    old_bad, rollout_bad = old.clone(), rollout.clone()
    old_bad[1, 2], rollout_bad[1, 2] = float("nan"), float("-inf")
    weights_bad, keep_bad, metrics_bad = rollout_correction(
        old_bad, rollout_bad, mask, mode, cap=1.1, lower=0.7, upper=1.5
    )
    assert_close(weights_bad, weights)
    assert torch.equal(keep_bad, keep)
    assert metrics_bad == metrics
    assert weights[1, 2] == 0 and not keep[1, 2]


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTION_MODES)
def test_no_gradient_flows_through_the_weights(mode):
    old = torch.tensor(OLD, requires_grad=True)
    rollout = torch.tensor(ROLLOUT, requires_grad=True)
    weights, _, _ = rollout_correction(old, rollout, torch.tensor(MASK), mode, cap=1.1, lower=0.7, upper=1.5)
    assert not weights.requires_grad
    logprobs = torch.tensor(OLD, requires_grad=True)  # stands for the trainer's current log-probs
    (weights * logprobs).sum().backward()
    assert old.grad is None and rollout.grad is None
    assert_close(logprobs.grad, weights)


@pytest.mark.parametrize("mode", ROLLOUT_CORRECTION_MODES)
@pytest.mark.parametrize("gap", [1e4, -1e4, float("inf"), float("-inf")])
def test_extreme_gaps_do_not_overflow(mode, gap):
    old = torch.zeros(2, 4)
    rollout = torch.full((2, 4), -gap)  # log rho = gap on every token
    mask = torch.ones(2, 4)
    weights, _, metrics = rollout_correction(old, rollout, mask, mode, cap=3.0)
    assert torch.isfinite(weights).all()
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    if mode in ("token_tis", "seq_tis"):
        expected = 3.0 if gap > 0 else math.exp(-20.0)  # log ratios are clamped to [-20, 20] before exp
        assert_close(weights, torch.full((2, 4), expected))
    if mode.endswith("_mis"):
        assert (weights == 0).all() and metrics["rollout_corr/masked_token_frac"] == 1.0


def test_metrics_on_the_example():
    cap = 1.1
    old, rollout, mask = _tensors()
    weights, keep, metrics = rollout_correction(old, rollout, mask, "token_tis", cap=cap)
    lrs = [lr for row in _log_ratios() for lr in row]
    ratios = [math.exp(lr) for lr in lrs]
    ws = [min(r, cap) for r in ratios]
    seq_logs = [sum(row) for row in _log_ratios()]
    n = len(lrs)
    expected = {
        "rollout_corr/ratio_mean": sum(ratios) / n,
        "rollout_corr/ratio_min": min(ratios),
        "rollout_corr/ratio_max": max(ratios),
        "rollout_corr/seq_log_ratio_mean": sum(seq_logs) / 2,
        "rollout_corr/seq_log_ratio_min": min(seq_logs),
        "rollout_corr/seq_log_ratio_max": max(seq_logs),
        "rollout_corr/logp_abs_diff_mean": sum(abs(lr) for lr in lrs) / n,
        "rollout_corr/logp_abs_diff_max": max(abs(lr) for lr in lrs),
        "rollout_corr/kl_k1": sum(-lr for lr in lrs) / n,
        "rollout_corr/kl_k3": sum(r - 1 - lr for r, lr in zip(ratios, lrs, strict=True)) / n,
        "rollout_corr/chi2_token": sum(r * r for r in ratios) / n - 1,
        "rollout_corr/weight_mean": sum(ws) / n,
        "rollout_corr/weight_max": max(ws),
        "rollout_corr/ess": sum(ws) ** 2 / (n * sum(w * w for w in ws)),
        "rollout_corr/masked_token_frac": 0.0,
        "rollout_corr/masked_seq_frac": 0.0,
        "rollout_corr/truncated_token_frac": 1 / n,
    }
    assert set(metrics) == set(expected)
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, rel=1e-5, abs=1e-6), name
    assert all(isinstance(v, float) for v in metrics.values())
    # the standalone metrics function gives the same numbers
    assert rollout_correction_metrics(old, rollout, mask, weights, keep, cap=cap) == metrics


def test_metrics_of_an_empty_mask_are_zero():
    old, rollout, _ = _tensors()
    mask = torch.zeros(2, 3)
    weights, keep, metrics = rollout_correction(old, rollout, mask, "seq_mis")
    assert (weights == 0).all() and not keep.any()
    assert metrics and all(v == 0.0 for v in metrics.values())


def test_untruncated_weights_are_exact_importance_weights():
    # rollout policy q and trainer policy p over 3 tokens; by enumeration E_q[w f] = E_p[f] when nothing is
    # truncated, and E_q[k1] = E_q[k3] = KL(q || p)
    p = [0.5, 0.3, 0.2]
    q = [0.2, 0.3, 0.5]
    f = [1.0, -2.0, 3.0]
    old = torch.tensor([[math.log(x) for x in p]], dtype=torch.float64)
    rollout = torch.tensor([[math.log(x) for x in q]], dtype=torch.float64)
    mask = torch.ones(1, 3)
    weights, _, _ = rollout_correction(old, rollout, mask, "token_tis", cap=100.0)
    assert sum(qi * wi * fi for qi, wi, fi in zip(q, weights[0].tolist(), f, strict=True)) == pytest.approx(
        sum(pi * fi for pi, fi in zip(p, f, strict=True)), rel=1e-5
    )
    true_kl = sum(qi * math.log(qi / pi) for pi, qi in zip(p, q, strict=True))
    log_ratio = rollout_log_ratio(old, rollout, mask)[0].double()
    k1 = (-log_ratio).tolist()
    k3 = (log_ratio.exp() - 1 - log_ratio).tolist()
    assert sum(qi * k for qi, k in zip(q, k1, strict=True)) == pytest.approx(true_kl, rel=1e-5)
    assert sum(qi * k for qi, k in zip(q, k3, strict=True)) == pytest.approx(true_kl, rel=1e-5)


def test_invalid_arguments_raise():
    old, rollout, mask = _tensors()
    with pytest.raises(ValueError, match="valid modes"):
        rollout_correction(old, rollout, mask, "token_clip")
    with pytest.raises(ValueError, match="valid modes"):
        check_rollout_correction_mode("sequence")
    assert check_rollout_correction_mode("seq_tis") == "seq_tis"
    with pytest.raises(ValueError, match="cap"):
        rollout_correction(old, rollout, mask, "token_tis", cap=0.0)
    with pytest.raises(ValueError, match="upper"):
        rollout_correction(old, rollout, mask, "seq_mis", upper=0.9)
    with pytest.raises(ValueError, match="lower"):
        rollout_correction(old, rollout, mask, "token_mis", lower=1.1, upper=2.0)
    with pytest.raises(ValueError, match="shape"):
        rollout_correction(old[:, :2], rollout, mask, "none")

"""Loss aggregation: hand-computed values of every mode, masking, and invariance of loss AND gradients when a
batch is split into micro-batches (with different padding) and data-parallel ranks."""

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import AGG_MODES, aggregate_loss, check_agg_mode, count_tokens_and_seqs, get_policy_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), float("inf")], [5.0, 6.0, 7.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # third row is empty (e.g. data-parallel padding)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4),
        ("seq-mean-token-sum", ((1 + 2 + 3) + 4) / 2),
        ("seq-mean-token-mean", ((1 + 2 + 3) / 3 + 4 / 1) / 2),
        ("seq-mean-token-sum-norm", (1 + 2 + 3 + 4) / (2 * 4)),
    ],
)
def test_modes_hand_computed(mode, expected):
    # masked NaN / inf are ignored; the empty row counts neither as tokens nor as a sequence
    out = aggregate_loss(LOSS, MASK, mode, norm_constant=4)
    assert_close(out, torch.tensor(expected))


def test_global_counts_override_local_counts():
    assert_close(aggregate_loss(LOSS, MASK, "token-mean", global_num_tokens=20), torch.tensor(10 / 20))
    assert_close(aggregate_loss(LOSS, MASK, "seq-mean-token-sum", global_num_seqs=5), torch.tensor(10 / 5))
    assert_close(aggregate_loss(LOSS, MASK, "seq-mean-token-mean", global_num_seqs=4), torch.tensor(6 / 4))
    out = aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", global_num_seqs=5, norm_constant=2)
    assert_close(out, torch.tensor(10 / 10))


def test_empty_mask_gives_zero_not_nan():
    for mode in AGG_MODES:
        out = aggregate_loss(torch.ones(2, 3), torch.zeros(2, 3), mode, norm_constant=3)
        assert out.item() == 0.0


def test_count_tokens_and_seqs():
    assert count_tokens_and_seqs(MASK) == (4, 2)


def _make_batch(seed=0, batch=9, seq=8):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, seq + 1, (batch,), generator=gen)  # includes empty rows
    lengths[0] = seq
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    weights = torch.randn(batch, seq, generator=gen)
    return mask, weights


def _split(mask, sizes):
    """Row slices of ``sizes``, each trimmed to its own longest row (dynamic padding per micro-batch)."""
    start, out = 0, []
    for size in sizes:
        rows = slice(start, start + size)
        width = max(int(mask[rows].sum(dim=-1).max()), 1)
        out.append((rows, width))
        start += size
    return out


@pytest.mark.parametrize("mode", AGG_MODES)
def test_micro_batch_and_data_parallel_invariance(mode):
    mask, weights = _make_batch()
    param = torch.randn(mask.shape, requires_grad=True)
    num_tokens, num_seqs = count_tokens_and_seqs(mask)
    kwargs = {"global_num_tokens": num_tokens, "global_num_seqs": num_seqs, "norm_constant": 16}

    full = aggregate_loss(weights * param.square(), mask, mode, **kwargs)
    (full_grad,) = torch.autograd.grad(full, param)

    # 2 "ranks" x micro-batches of sizes [2, 1, 1] and [3, 2]; every piece has its own padding width
    total = torch.zeros(())
    grad = torch.zeros_like(param)
    for rows, width in _split(mask, [2, 1, 1, 3, 2]):
        piece = aggregate_loss(weights[rows, :width] * param[rows, :width].square(), mask[rows, :width], mode, **kwargs)
        (g,) = torch.autograd.grad(piece, param)
        total = total + piece.detach()
        grad += g
    assert_close(total, full.detach())
    assert_close(grad, full_grad)


def test_local_counts_are_not_invariant_which_is_why_global_counts_exist():
    mask, weights = _make_batch(seed=1)
    full = aggregate_loss(weights, mask, "token-mean")
    pieces = sum(aggregate_loss(weights[r, :w], mask[r, :w], "token-mean") for r, w in _split(mask, [4, 5]))
    assert not torch.allclose(pieces, full)


@pytest.mark.parametrize("loss_name", ["ppo", "gspo", "cispo", "reinforce"])
def test_policy_losses_are_micro_batch_invariant(loss_name):
    mask, weights = _make_batch(seed=2)
    logits = torch.randn(mask.shape, requires_grad=True)
    old = torch.randn(mask.shape) * 0.1 - 1.0
    adv = weights
    fn = get_policy_loss(loss_name)
    num_tokens, num_seqs = count_tokens_and_seqs(mask)
    kw = {"agg_mode": "seq-mean-token-mean", "global_num_tokens": num_tokens, "global_num_seqs": num_seqs}

    def logp(rows, width):
        return torch.nn.functional.logsigmoid(logits[rows, :width]) - 0.5

    full, _ = fn(logp(slice(None), mask.shape[1]), old, adv, mask, **kw)
    (full_grad,) = torch.autograd.grad(full, logits)
    grad = torch.zeros_like(logits)
    total = 0.0
    for rows, width in _split(mask, [3, 3, 3]):
        piece, _ = fn(logp(rows, width), old[rows, :width], adv[rows, :width], mask[rows, :width], **kw)
        grad += torch.autograd.grad(piece, logits)[0]
        total += piece.item()
    assert abs(total - full.item()) < 1e-5
    assert_close(grad, full_grad)


def test_unknown_mode_and_missing_norm_constant_raise():
    with pytest.raises(ValueError, match="unknown loss aggregation mode 'mean'.*token-mean"):
        aggregate_loss(LOSS, MASK, "mean")
    with pytest.raises(ValueError, match="valid modes"):
        check_agg_mode("sum")
    assert check_agg_mode("token-mean") == "token-mean"
    with pytest.raises(ValueError, match="norm_constant"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")

"""Chunked entropy (values, chunk-size independence, exact gradients, large vocabulary), entropy bonus and the
Skywork-OR1 adaptive entropy controller."""

import math

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import AdaptiveEntropyController, entropy_bonus, entropy_from_logits


def test_known_entropies():
    probs = torch.tensor([0.5, 0.25, 0.25])
    logits = torch.stack([probs.log(), torch.zeros(3), torch.tensor([100.0, 0.0, 0.0])])[None]  # [1, 3, 3]
    out = entropy_from_logits(logits)
    assert_close(out, torch.tensor([[1.5 * math.log(2), math.log(3), 0.0]]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1000])
def test_matches_categorical_entropy_for_any_chunk_size(chunk_size):
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)) * 3
    expected = torch.distributions.Categorical(logits=logits).entropy()
    assert_close(entropy_from_logits(logits, chunk_size=chunk_size), expected)


def test_chunked_gradient_is_exact():
    base = torch.randn(2, 4, 9, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, 4, generator=torch.Generator().manual_seed(2))
    chunked = base.clone().requires_grad_()
    (grad_chunked,) = torch.autograd.grad((entropy_from_logits(chunked, chunk_size=3) * weights).sum(), chunked)
    plain = base.clone().requires_grad_()
    (grad_plain,) = torch.autograd.grad(
        (torch.distributions.Categorical(logits=plain).entropy() * weights).sum(), plain
    )
    assert_close(grad_chunked, grad_plain)


def test_bf16_logits_are_computed_in_float32_and_large_vocab_works():
    logits = torch.zeros(1, 4, 150_000, dtype=torch.bfloat16)
    out = entropy_from_logits(logits, chunk_size=2)
    assert out.dtype == torch.float32
    assert_close(out, torch.full((1, 4), math.log(150_000)))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match=r"\[batch, seq, vocab\]"):
        entropy_from_logits(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="chunk_size"):
        entropy_from_logits(torch.zeros(1, 2, 3), chunk_size=0)


def test_entropy_bonus_is_minus_coef_times_mean_entropy():
    entropy = torch.tensor([[1.0, 2.0, 50.0]], requires_grad=True)
    loss, m = entropy_bonus(entropy, torch.tensor([[1, 1, 0]]), coef=0.01)
    assert_close(loss, torch.tensor(-0.01 * 1.5))
    assert_close(m["entropy"], torch.tensor(1.5))
    (grad,) = torch.autograd.grad(loss, entropy)
    assert_close(grad, torch.tensor([[-0.005, -0.005, 0.0]]))


def test_adaptive_entropy_controller_trace():
    ctl = AdaptiveEntropyController(target_entropy=0.2, init_coef=0.0, delta=1e-3, min_coef=0.0, max_coef=2.5e-3)
    assert ctl.effective_coef == 0.0 and not ctl.enabled
    trace = []
    for h in [0.1, 0.1, 0.1, 0.3, 0.3, 0.3, 0.15]:
        ctl.update(h)
        trace.append((round(ctl.coef, 10), ctl.enabled, round(ctl.effective_coef, 10)))
    assert trace == [
        (1e-3, True, 1e-3),
        (2e-3, True, 2e-3),
        (2.5e-3, True, 2.5e-3),  # capped at max_coef
        (1.5e-3, False, 0.0),  # above target: coefficient decays, bonus switched off
        (0.5e-3, False, 0.0),
        (0.0, False, 0.0),  # floored at min_coef
        (1e-3, True, 1e-3),
    ]


def test_adaptive_entropy_controller_validates_bounds():
    with pytest.raises(ValueError, match="min_coef"):
        AdaptiveEntropyController(min_coef=1.0, max_coef=0.5)
    assert AdaptiveEntropyController(init_coef=1.0, max_coef=5e-3).coef == 5e-3  # init is clipped into bounds


def _extra_saved_bytes(fn, logits):
    """Bytes autograd saves for backward outside the storage of ``logits`` itself."""
    saved = []

    def pack(t):
        same_storage = t.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
        saved.append(0 if same_storage else t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(logits)
    return sum(saved)


def test_backward_keeps_no_vocab_sized_temporaries():
    logits = torch.randn(2, 32, 1000, requires_grad=True)
    vocab_rows_bytes = 1000 * 4
    # the plain formula keeps [rows, vocab] float tensors (softmax, products) alive until backward ...
    plain = _extra_saved_bytes(lambda z: torch.distributions.Categorical(logits=z).entropy(), logits)
    assert plain >= 64 * vocab_rows_bytes
    # ... the chunked, checkpointed version keeps only (views of) the logits
    assert _extra_saved_bytes(lambda z: entropy_from_logits(z, chunk_size=8), logits) < vocab_rows_bytes

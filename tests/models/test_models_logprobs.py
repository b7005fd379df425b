"""Response log-probs / entropies vs a naive per-sample forward of the tiny model; the chunked log-prob kernel.

Tolerances: a padded grid, one packed row and a per-sample forward run the same float32 model with other matmul and
attention shapes, so each log-prob is summed in another order; measured at most 1.9e-6 on log-probs up to |33|
(also with torch, oneDNN and MKL limited to AVX2 and one thread). atol 1e-5 (1e-6 for the small gradients and losses)
is 5x that; what the comparisons catch is larger: a layout that lets attention cross samples, or a shifted label,
moves log-probs by 0.2 to 1.5 (the atol=1e-3 checks below assert that it does).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from reasonrl.models.batching import pack_batch, pad_batch
from reasonrl.models.logprobs import logprobs_from_logits, response_logits, response_logprobs

# different prompt and response lengths, including an empty response and a 1-token prompt
SAMPLES = [
    ([5, 17, 300, 42, 7], [99, 100, 2]),
    ([9], [12, 13, 14, 15, 16, 2]),
    ([33, 44, 55], []),
    ([1, 200, 201, 202, 203, 204, 205], [1000, 1500]),
]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/conftest.py


def load_lm(path, attn_implementation):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn_implementation)
    return model.eval()


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return load_lm(tiny_model_dir, "sdpa")


@pytest.fixture(scope="module")
def lm_eager(tiny_model_dir):
    return load_lm(tiny_model_dir, "eager")


def naive(model, samples, temperature=1.0):
    """Per-sample unpadded forward: lists of [r] log-probs and entropies of softmax(logits / T)."""
    logprobs, entropies = [], []
    for prompt, response in samples:
        ids = torch.tensor([prompt + response])
        logits = model(input_ids=ids).logits[0].float() / temperature  # [len, vocab]
        logp = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) - 1 + len(response)], dim=-1)  # [r, vocab]
        logprobs.append(logp.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1))
        entropies.append(-(logp.exp() * logp).sum(-1))
    return logprobs, entropies


def layouts():
    return {"padded": pad_batch(SAMPLES, pad_token_id=0), "packed": pack_batch(SAMPLES)}


def check_against(grid, expected, batch):
    assert grid.shape == batch.action_mask.shape and grid.dtype == torch.float32
    for i, exp in enumerate(expected):
        assert torch.allclose(grid[i, : len(exp)], exp, atol=1e-5, rtol=0), (i, (grid[i, : len(exp)] - exp).abs())
    assert (grid[~batch.action_mask] == 0).all()  # masked positions are exactly 0


# ---------------------------------------------------------------------------------------------------------------
# logprobs_from_logits


@pytest.mark.parametrize("chunk_size", [1, 7, 1024])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_logprobs_from_logits_exact_and_grad(chunk_size, temperature):
    torch.manual_seed(0)
    logits = (torch.randn(3, 5, 50) * 4).requires_grad_()
    labels = torch.randint(0, 50, (3, 5))
    got = logprobs_from_logits(logits, labels, temperature, chunk_size)
    ref = torch.log_softmax(logits / temperature, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert got.shape == (3, 5) and torch.allclose(got, ref, atol=1e-5, rtol=0)  # fp32 rounding at |logp| ~ 20
    weights = torch.randn(3, 5)
    (g_got,) = torch.autograd.grad((got * weights).sum(), logits)
    (g_ref,) = torch.autograd.grad((ref * weights).sum(), logits)
    assert torch.allclose(g_got, g_ref, atol=1e-6, rtol=0)


def test_logprobs_from_logits_low_precision_is_computed_in_fp32():
    torch.manual_seed(1)
    logits = torch.randn(4, 2048).bfloat16() * 8
    labels = torch.randint(0, 2048, (4,))
    got = logprobs_from_logits(logits, labels, chunk_size=3)
    ref = torch.log_softmax(logits.float(), -1).gather(-1, labels[:, None])[:, 0]
    assert got.dtype == torch.float32 and torch.allclose(got, ref, atol=1e-5, rtol=0)


def test_logprobs_from_logits_validation():
    with pytest.raises(ValueError):
        logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError):
        logprobs_from_logits(torch.zeros(2, 5), torch.zeros(2, dtype=torch.long), temperature=0.0)
    assert logprobs_from_logits(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long)).shape == (0,)


# ---------------------------------------------------------------------------------------------------------------
# response_logprobs on the tiny model


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_matches_naive_forward(request, layout, attn):
    lm = request.getfixturevalue("lm" if attn == "sdpa" else "lm_eager")
    batch = layouts()[layout]
    with torch.no_grad():
        logprobs, entropy = response_logprobs(lm, batch)
        exp_lp, _ = naive(lm, SAMPLES)
    assert entropy is None
    check_against(logprobs, exp_lp, batch)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_temperature_and_entropy(lm, layout):
    batch = layouts()[layout]
    temperature = 0.7
    with torch.no_grad():
        logprobs, entropy = response_logprobs(lm, batch, temperature=temperature, with_entropy=True)
        exp_lp, exp_h = naive(lm, SAMPLES, temperature)
        raw_lp, _ = naive(lm, SAMPLES, 1.0)
    check_against(logprobs, exp_lp, batch)
    check_against(entropy, exp_h, batch)
    assert not torch.allclose(logprobs[0, :3], raw_lp[0], atol=1e-3)  # the temperature did change something


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_logits_to_keep_gives_the_same_rows(lm, layout):
    batch = layouts()[layout]
    with torch.no_grad():
        full, labels = response_logits(lm, batch)
        kept, kept_labels = response_logits(lm, batch, use_logits_to_keep=True)
    assert kept.shape == full.shape and torch.equal(labels, kept_labels)
    assert torch.allclose(kept, full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_lm_head_runs_on_response_positions_only_by_default(lm, layout):
    """Issue 13 item 7: the default forward no longer computes [prompt, vocab] logits; results are unchanged."""
    batch = layouts()[layout]
    seen = []

    def recording(**kwargs):
        out = lm(**kwargs)
        seen.append(out.logits.shape[1])
        return out

    with torch.no_grad():
        default = response_logprobs(recording, batch, 0.7, with_entropy=True)
        full = response_logprobs(recording, batch, 0.7, with_entropy=True, use_logits_to_keep=False)
    kept_positions, all_positions = seen
    assert all_positions == batch.input_ids.shape[1] and kept_positions < all_positions
    for a, b in zip(default, full, strict=True):
        assert torch.allclose(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_needs_no_mask_and_no_cache(request, attn):
    """Why the helpers pass attention_mask=None and use_cache=False: with an all-ones mask, or with the config's
    default KV cache, transformers skips the packed-sequence detection and attention crosses sequences."""
    lm = request.getfixturevalue("lm" if attn == "sdpa" else "lm_eager")
    batch = pack_batch(SAMPLES)
    with torch.no_grad():
        good, _ = response_logits(lm, batch)
        leaky = lm(input_ids=batch.input_ids, position_ids=batch.position_ids).logits  # default use_cache
        masked = lm(
            input_ids=batch.input_ids,
            attention_mask=torch.ones_like(batch.input_ids),
            position_ids=batch.position_ids,
            use_cache=False,
        ).logits
    second = slice(batch.response_lens[0], None)  # response rows of the sequences after the first
    for bad in (leaky, masked):
        assert not torch.allclose(batch.response_slice(bad)[second], good[0][second], atol=1e-3)


def test_gradient_flows(lm):
    lm.train()
    try:
        for batch in layouts().values():
            lm.zero_grad()
            logprobs, entropy = response_logprobs(lm, batch, temperature=0.9, with_entropy=True)
            (logprobs.sum() + 0.1 * entropy.sum()).backward()
            for name in ("lm_head.weight", "model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight"):
                grad = lm.get_parameter(name).grad
                assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    finally:
        lm.zero_grad()
        lm.eval()


def test_padded_and_packed_gradients_agree(lm):
    grads = []
    for batch in layouts().values():
        lm.zero_grad()
        logprobs, _ = response_logprobs(lm, batch)
        logprobs.sum().backward()
        grads.append(lm.lm_head.weight.grad.clone())
    lm.zero_grad()
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=0)


def test_accepts_any_callable_returning_logits(lm):
    calls = []

    def wrapped(**kwargs):  # e.g. a DeepSpeed engine: forwards keyword arguments to the module
        calls.append(sorted(kwargs))
        return lm(**kwargs)

    batch = pad_batch(SAMPLES, 0)
    with torch.no_grad():
        got, _ = response_logprobs(wrapped, batch)
        ref, _ = response_logprobs(lm, batch)
    assert torch.equal(got, ref)
    assert calls == [["attention_mask", "input_ids", "logits_to_keep", "position_ids", "use_cache"]]
    with pytest.raises(TypeError):
        response_logprobs(lm, object())
    with pytest.raises(ValueError):
        response_logprobs(lm, batch, temperature=0)


def test_a_loss_mask_with_holes_gives_the_same_loss_and_gradients_packed_as_padded(lm):
    """Multi-turn samples mask tool output inside the response (holes); the worker's loss mask
    (``ppo_workers._loss_mask``) sits on the response grid, which packing and padding share, so the PPO loss and its
    gradients are the same in both layouts."""
    from types import SimpleNamespace

    from reasonrl.algos import get_policy_loss
    from reasonrl.distributed.ppo_workers import _loss_mask

    holes = [[True, False, True], [True, True, False, False, True, True], [], [False, True]]
    width = max(len(r) for _, r in SAMPLES)
    grid = torch.zeros(len(SAMPLES), width, dtype=torch.bool)
    for i, m in enumerate(holes):
        grid[i, : len(m)] = torch.tensor(m, dtype=torch.bool)
    gen = torch.Generator().manual_seed(0)
    advantages = torch.randn(grid.shape, generator=gen)
    shift = torch.randn(grid.shape, generator=gen) * 0.05
    losses, grads = [], []
    for batch in layouts().values():
        mask = _loss_mask(batch, SimpleNamespace(action_mask=grid))
        lm.zero_grad()
        logprobs, _ = response_logprobs(lm, batch)
        loss, _ = get_policy_loss("ppo")(
            logprobs, logprobs.detach() + shift, advantages, mask, clip_low=0.2, clip_high=0.2
        )
        loss.backward()
        losses.append(loss.detach())
        grads.append(lm.lm_head.weight.grad.clone())
    lm.zero_grad()
    assert torch.allclose(losses[0], losses[1], atol=1e-6, rtol=0)
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=0) and grads[0].abs().sum() > 0

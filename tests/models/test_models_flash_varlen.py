"""A packed batch's ``cu_seqlens`` reach transformers' flash-attention code, on CPU.

flash-attn has no CPU kernels, so transformers' own flash path runs with the kernels replaced: the model's
attention is ``transformers.integrations.flash_attention.flash_attention_forward`` (what ``flash_attention_2``
dispatches to) and ``_flash_attention_forward`` runs unchanged; only ``_lazy_imports`` (which would import the
flash_attn package) returns a varlen kernel written with torch's sdpa, one causal block per ``cu_seqlens`` range.
Counting transformers' own helpers shows which branch each layer took: with the batch's kwargs no layer derives
``cu_seqlens`` from the position ids; without them every layer does, and gets the same values.

The varlen path is compared with the padded sdpa forward at atol 1e-5: another attention kernel and other shapes on
the same float32 weights (measured at most 9.5e-7 on log-probs up to |8|, also with torch, oneDNN and MKL limited to
AVX2 and one thread); attention that crosses samples moves log-probs by 0.2 and more (test_models_logprobs.py).
The two varlen forwards (kwargs given or derived) run the same kernels on the same shapes: bit-equal.
"""

from __future__ import annotations

import pytest
import torch
import transformers.modeling_flash_attention_utils as fa_utils
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.integrations.flash_attention import flash_attention_forward

from reasonrl.models import load_critic, pack_batch, pad_batch, response_logprobs, response_values

# a name without "flash": transformers would otherwise look for the flash_attn package when loading
PROBE = "reasonrl_cpu_flash_probe"
SAMPLES = [([5, 17, 300, 42, 7], [99, 100, 2]), ([9], [12, 13, 14, 15, 16, 2]), ([33, 44, 55], []), ([1, 2], [3])]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/conftest.py


class Probe:
    """The fake kernels and what transformers handed them."""

    def __init__(self):
        self.varlen_calls: list[tuple[torch.Tensor, torch.Tensor, object, object]] = []
        self.derived = 0  # layers that rebuilt cu_seqlens from position_ids

    def varlen(self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=True,
               softmax_scale=None, dropout_p=0.0):  # fmt: skip
        """flash_attn_varlen_func's contract: q [total, heads, d], k/v [total, kv_heads, d] -> [total, heads, d]."""
        self.varlen_calls.append((cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))
        assert causal and cu_seqlens_q.dtype == torch.int32
        groups = q.shape[1] // k.shape[1]
        out = torch.empty_like(q)
        bounds = cu_seqlens_q.tolist()
        for start, end in zip(bounds[:-1], bounds[1:], strict=True):
            qs, ks, vs = (x[start:end].transpose(0, 1) for x in (q, k, v))  # [heads, len, d]
            ks, vs = ks.repeat_interleave(groups, 0), vs.repeat_interleave(groups, 0)
            attn = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=softmax_scale)
            out[start:end] = attn.transpose(0, 1)
        return out

    @staticmethod
    def dense(*args, **kwargs):
        raise AssertionError("a packed row must take the varlen kernel")


@pytest.fixture
def probe(monkeypatch):
    probe = Probe()
    real_prepare = fa_utils.prepare_fa_kwargs_from_position_ids

    def counting_prepare(position_ids):
        probe.derived += 1
        return real_prepare(position_ids)

    monkeypatch.setattr(
        fa_utils, "_lazy_imports", lambda *a, **k: (probe.dense, probe.varlen, None, fa_utils._pad_input, None)
    )
    monkeypatch.setattr(fa_utils, "_loaded_implementation", None)  # load the fakes for PROBE
    monkeypatch.setattr(fa_utils, "prepare_fa_kwargs_from_position_ids", counting_prepare)
    monkeypatch.setitem(AttentionInterface._global_mapping, PROBE, flash_attention_forward)
    return probe


def lm(path, attn):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn).eval()


def test_transformers_flash_path_takes_the_batch_cu_seqlens(probe, tiny_model_dir):
    model = lm(tiny_model_dir, PROBE)
    layers = model.config.num_hidden_layers
    expected, _ = response_logprobs(lm(tiny_model_dir, "sdpa"), pad_batch(SAMPLES, 0))

    batch = pack_batch(SAMPLES, flash_varlen=True)
    with torch.no_grad():
        given, _ = response_logprobs(model, batch)
    assert probe.derived == 0 and len(probe.varlen_calls) == layers  # every layer: the varlen kernel, kwargs as given
    for cu_q, cu_k, max_q, max_k in probe.varlen_calls:
        assert cu_q is batch.cu_seqlens and cu_k is batch.cu_seqlens  # no copy, no rebuild
        assert type(max_q) is int and max_q == max_k == max(batch.seq_lens)
    torch.testing.assert_close(given, expected, atol=1e-5, rtol=0)

    probe.varlen_calls.clear()
    with torch.no_grad():
        derived, _ = response_logprobs(model, pack_batch(SAMPLES))  # no kwargs: transformers rebuilds them
    assert probe.derived == layers and len(probe.varlen_calls) == layers
    for cu_q, _, max_q, _ in probe.varlen_calls:
        assert torch.equal(cu_q, batch.cu_seqlens) and int(max_q) == max(batch.seq_lens)
    assert torch.equal(derived, given)


def test_kwargs_survive_gradient_checkpointing_and_backward(probe, tiny_model_dir):
    model = lm(tiny_model_dir, PROBE)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    logprobs, _ = response_logprobs(model, pack_batch(SAMPLES, flash_varlen=True))
    logprobs.sum().backward()
    assert probe.derived == 0  # the recomputed forward got them too
    assert len(probe.varlen_calls) == 2 * model.config.num_hidden_layers  # forward + recompute
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None


def test_critic_passes_them_to_its_backbone(probe, tiny_model_dir):
    critic = load_critic(tiny_model_dir, attn_implementation=PROBE).eval()
    reference = load_critic(tiny_model_dir, attn_implementation="sdpa").eval()
    with torch.no_grad():
        values = response_values(critic, pack_batch(SAMPLES, flash_varlen=True))
        expected = response_values(reference, pad_batch(SAMPLES, 0))
    assert probe.derived == 0 and len(probe.varlen_calls) == critic.config.num_hidden_layers
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)

"""A plain model assembled from in-memory tensors (the weight sync's ``sent_weights`` verification)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, Qwen2ForCausalLM

from reasonrl.models.host_copy import model_from_tensors, sequence_logprobs


def _tensors(model):
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    return params, buffers


@pytest.mark.parametrize("tied", [False, True])
def test_assembled_model_scores_exactly_like_the_loaded_one(tiny_model_dir, tied):
    config = AutoConfig.from_pretrained(tiny_model_dir, tie_word_embeddings=tied)
    torch.manual_seed(0)
    reference = Qwen2ForCausalLM(config).eval()
    params, buffers = _tensors(reference)
    assert ("lm_head.weight" in params) is (not tied)  # tied: named_parameters lists the embedding once

    model = model_from_tensors(config, params, buffers)
    assert all(model.get_parameter(n).data_ptr() == t.data_ptr() for n, t in params.items()), "used, not copied"
    if tied:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = list(range(5, 37))
    expected = sequence_logprobs(reference, ids)
    assert len(expected) == len(ids) - 1
    assert sequence_logprobs(model, ids) == expected  # bit-equal: same weights, same kernels


def test_log_probs_are_teacher_forced_next_token_log_probs(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    ids = [7, 11, 13, 17]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    expected = [torch.log_softmax(logits[t], -1)[ids[t + 1]].item() for t in range(len(ids) - 1)]
    assert sequence_logprobs(model, ids) == pytest.approx(expected, abs=1e-6)


def test_missing_or_foreign_tensors_are_named(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    params, buffers = _tensors(model)
    missing = dict(params)
    missing.pop("model.norm.weight")
    with pytest.raises(ValueError, match=r"model\.norm\.weight"):
        model_from_tensors(model.config, missing, buffers)
    with pytest.raises(ValueError, match="not parameters of the model"):
        model_from_tensors(model.config, params | {"extra.weight": torch.zeros(1)}, buffers)


def test_the_training_models_config_keeps_its_attention(tiny_model_dir):
    """The probe model is built from the training model's own config object; building it (sdpa) must not switch the
    training model's attention (transformers' from_config writes attn_implementation into the config it keeps: the
    policy's eager or Ulysses attention became sdpa after the first sync, found by a sequence-parallel run)."""
    trained = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager")
    params, buffers = _tensors(trained)
    probe = model_from_tensors(trained.config, params, buffers, attn_implementation="sdpa")
    assert trained.config._attn_implementation == "eager"
    assert probe.config._attn_implementation == "sdpa" and probe.config is not trained.config

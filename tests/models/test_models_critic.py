"""The critic: backbone from a causal-LM checkpoint, value alignment with response tokens, save/load, gradients."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from reasonrl.models.batching import pack_batch, pad_batch
from reasonrl.models.critic import VALUE_HEAD_FILE, CriticModel, load_critic, response_values, save_critic

SAMPLES = [([5, 17, 300, 42, 7], [99, 100, 2]), ([9], [12, 13, 14, 15, 16, 2]), ([33, 44, 55], [])]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/conftest.py


@pytest.fixture(scope="module")
def critic(tiny_model_dir):
    return load_critic(tiny_model_dir).eval()


def test_backbone_from_causal_lm_checkpoint(critic, tiny_model_dir):
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    expected = lm.model.state_dict()
    got = critic.backbone.state_dict()
    assert sorted(got) == sorted(expected)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert not any("lm_head" in k for k in critic.state_dict())


def test_value_head_init(critic, tiny_model_dir):
    hidden = critic.config.hidden_size
    head = critic.value_head
    assert head.weight.shape == (1, hidden) and head.bias is None
    assert abs(head.weight.std().item() * (hidden + 1) - 1) < 0.2  # N(0, 1/(hidden+1))
    # deterministic by seed, independent of the global RNG (every ZeRO rank builds the same head)
    torch.manual_seed(123)
    again = load_critic(tiny_model_dir)
    assert torch.equal(again.value_head.weight, head.weight)
    other = load_critic(tiny_model_dir, seed=1, bias=True)
    assert not torch.equal(other.value_head.weight, head.weight) and torch.equal(other.value_head.bias, torch.zeros(1))


def test_forward_shapes_and_dtype(critic, tiny_model_dir):
    batch = pad_batch(SAMPLES, 0)
    with torch.no_grad():
        values = critic(batch.input_ids, batch.attention_mask, batch.position_ids)
    assert values.shape == batch.input_ids.shape and values.dtype == torch.float32
    bf16 = load_critic(tiny_model_dir, torch.bfloat16)
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    with torch.no_grad():
        assert bf16(batch.input_ids, batch.attention_mask, batch.position_ids).dtype == torch.float32


@pytest.mark.parametrize("layout", ["padded", "packed"])
def test_values_are_the_state_before_each_response_token(critic, layout):
    """values[i, t] = V(prompt_i + response_i[:t]): the critic's last-position value on exactly that prefix."""
    batch = pad_batch(SAMPLES, 0) if layout == "padded" else pack_batch(SAMPLES)
    with torch.no_grad():
        values = response_values(critic, batch)
        assert values.shape == batch.action_mask.shape and values.dtype == torch.float32
        assert (values[~batch.action_mask] == 0).all()
        for i, (prompt, response) in enumerate(SAMPLES):
            for t in range(len(response)):
                state = torch.tensor([prompt + response[:t]])  # s_t
                expected = critic(state, torch.ones_like(state), torch.arange(state.shape[1])[None])[0, -1]
                # the same float32 model on another shape (a prefix alone): rounding only, as the log-prob layouts
                # (tests/models/test_models_logprobs.py); a value read one position off differs by far more
                assert abs(values[i, t].item() - expected.item()) < 1e-5, (i, t)


def test_save_load_round_trip(critic, tmp_path):
    batch = pad_batch(SAMPLES, 0)
    save_critic(critic, tmp_path / "critic")
    assert {"config.json", "model.safetensors", VALUE_HEAD_FILE} <= {p.name for p in (tmp_path / "critic").iterdir()}
    assert set(load_file(tmp_path / "critic" / VALUE_HEAD_FILE)) == {"weight"}
    loaded = load_critic(tmp_path / "critic").eval()
    state, loaded_state = critic.state_dict(), loaded.state_dict()
    assert sorted(state) == sorted(loaded_state)
    assert all(torch.equal(state[k], loaded_state[k]) for k in state)
    with torch.no_grad():
        assert torch.equal(response_values(critic, batch), response_values(loaded, batch))


def test_save_with_bias_and_explicit_state_dict(tiny_model_dir, tmp_path):
    source = load_critic(tiny_model_dir, bias=True, seed=3)
    with torch.no_grad():
        source.value_head.bias.fill_(0.25)
    state = {k: v.clone() for k, v in source.state_dict().items()}  # e.g. gathered from ZeRO-3 shards
    save_critic(source, tmp_path, state_dict=state)
    loaded = load_critic(tmp_path)
    assert loaded.value_head.bias is not None and loaded.value_head.bias.item() == 0.25
    assert torch.equal(loaded.value_head.weight, source.value_head.weight)
    with pytest.raises(ValueError, match="not a critic state dict"):
        save_critic(source, tmp_path / "bad", state_dict={"lm_head.weight": torch.zeros(1)})


def test_gradients_reach_head_and_backbone(tiny_model_dir):
    critic = load_critic(tiny_model_dir).train()
    for batch in (pad_batch(SAMPLES, 0), pack_batch(SAMPLES)):
        critic.zero_grad()
        values = response_values(critic, batch)
        ((values - 1.0) ** 2)[batch.action_mask].mean().backward()
        for name in ("value_head.weight", "backbone.embed_tokens.weight", "backbone.layers.1.mlp.down_proj.weight"):
            grad = critic.get_parameter(name).grad
            assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


def test_wraps_any_backbone_and_rejects_unknown_batches(critic):
    wrapped = CriticModel(critic.backbone, critic.value_head)
    assert wrapped.value_head is critic.value_head and wrapped.config is critic.config
    with pytest.raises(TypeError):
        response_values(critic, object())

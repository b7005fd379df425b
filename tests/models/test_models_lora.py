"""LoRA adapters through PEFT (``reasonrl.models.lora``): target checks, the reference with the adapter off, and the
merged weights ``W + s B A`` under the base model's names, against PEFT's own ``merge_and_unload``."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from reasonrl.models.lora import (
    LoraSettings,
    adapter_disabled,
    add_adapters,
    base_name,
    linear_layer_names,
    merge_plan,
    merged_tensors,
    target_problems,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/conftest.py
IDS = torch.tensor([[5, 17, 300, 42, 7, 99, 100, 12]])


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def trained_adapter(path, settings: LoraSettings, seed: int = 0):
    """The model with adapters whose B is random (as after some training: B starts at zero)."""
    model = add_adapters(load(path), settings)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def logits(model, ids=IDS):
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_only_the_adapters_train_and_the_model_starts_as_the_base(tiny_model_dir):
    base = load(tiny_model_dir)
    model = add_adapters(load(tiny_model_dir), LoraSettings(rank=4, alpha=8))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert torch.equal(logits(model), logits(base))  # B = 0 at the start


def test_the_adapter_switched_off_is_the_base_model(tiny_model_dir):
    base = load(tiny_model_dir)
    model = trained_adapter(tiny_model_dir, LoraSettings(rank=4, alpha=8))
    assert not torch.allclose(logits(model), logits(base), atol=1e-4)
    with adapter_disabled(model):
        assert torch.equal(logits(model), logits(base))
    assert not torch.allclose(logits(model), logits(base), atol=1e-4)  # back on after the block


@pytest.mark.parametrize("targets", [("all-linear",), ("q_proj", "v_proj"), ("self_attn.o_proj",)])
def test_merged_weights_equal_peft_merge_and_unload_under_the_base_names(tiny_model_dir, targets):
    settings = LoraSettings(rank=4, alpha=16, target_modules=targets)
    model = trained_adapter(tiny_model_dir, settings)
    plan = merge_plan(model)
    base_names = [n for n, _ in load(tiny_model_dir).named_parameters()]
    assert list(plan) == base_names  # every base parameter, in order, under its Hugging Face name
    adapted = [n for n, e in plan.items() if e.lora_a is not None]
    assert adapted and all(
        any(n.endswith(f"{t}.weight") for t in targets) or targets == ("all-linear",) for n in adapted
    )
    sources = {n: p.detach().clone() for n, p in model.named_parameters()}
    merged = merged_tensors(plan, plan, sources)
    assert all(not torch.equal(merged[n], sources[plan[n].source]) for n in adapted)  # the update is in
    expected = model.merge_and_unload().state_dict()  # PEFT merges in place
    for name, tensor in merged.items():  # the same W + s B A as PEFT's (measured bit-equal); 1e-6 allows another order
        assert torch.allclose(tensor, expected[name], atol=1e-6, rtol=0), name


def test_merged_model_computes_what_the_adapted_model_computes(tiny_model_dir):
    model = trained_adapter(tiny_model_dir, LoraSettings(rank=8, alpha=8))
    plan = merge_plan(model)
    sources = {n: p.detach() for n, p in model.named_parameters()}
    plain = load(tiny_model_dir)
    plain.load_state_dict(merged_tensors(plan, plan, sources), strict=False)
    # one merged matmul vs the base matmul plus the adapter's: float32 rounding only (measured at most 1.1e-6, also
    # with torch, oneDNN and MKL limited to AVX2 and one thread); the adapter itself moves these logits by 0.8
    assert torch.allclose(logits(plain), logits(model), atol=1e-5, rtol=0)


def test_a_target_that_matches_nothing_is_named_with_the_layers_there_are(tiny_model_dir):
    config = AutoConfig.from_pretrained(tiny_model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert target_problems(model, ["all-linear", "q_proj", "mlp.up_proj"]) == []
    (problem,) = target_problems(model, ["q_proj", "query_key_value"])
    assert "'query_key_value' matches no linear layer" in problem and "'q_proj'" in problem
    assert "lm_head" not in linear_layer_names(model)
    with pytest.raises(ValueError, match="query_key_value"):
        add_adapters(load(tiny_model_dir), LoraSettings(rank=4, alpha=8, target_modules=("query_key_value",)))


def test_base_name_strips_the_peft_wrapping():
    assert base_name("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight") == (
        "model.layers.0.self_attn.q_proj.weight"
    )
    assert base_name("base_model.model.lm_head.weight") == "lm_head.weight"


def test_the_adapter_saved_alone_loads_with_peft(tiny_model_dir, tmp_path):
    from peft import PeftModel

    from reasonrl.models.lora import adapter_param_names, save_adapter

    model = trained_adapter(tiny_model_dir, LoraSettings(rank=4, alpha=8, target_modules=("q_proj", "down_proj")))
    params = dict(model.named_parameters())
    names = adapter_param_names(model)
    assert names and all(params[n].requires_grad for n in names)
    save_adapter(model, {n: params[n].detach().clone() for n in names}, tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in (tmp_path / "adapter").iterdir()}
    loaded = PeftModel.from_pretrained(load(tiny_model_dir), tmp_path / "adapter").eval()
    assert torch.equal(logits(loaded), logits(model))

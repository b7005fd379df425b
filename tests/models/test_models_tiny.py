"""The tiny offline Qwen2 model: deterministic, loadable by transformers, tokenizer consistent everywhere."""

from __future__ import annotations

import hashlib

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer

from reasonrl.models.tiny import TinyModelSpec, build_tiny_model

TEXTS = [
    "Ann has 12 apples. She gives away 5. How many are left?",
    "<think> 3 * 4 = 12 </think> <answer> \\boxed{12} </answer>",
    "def hello(): return 1  # unseen code, unicode: héllo wörld ∑ 𝛼",
    "  leading spaces\n\nand\ttabs 1234567890",
]


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_build_is_deterministic_by_seed(tmp_path):
    spec = TinyModelSpec(seed=3)
    a = build_tiny_model(tmp_path / "a", spec)
    b = build_tiny_model(tmp_path / "b", spec)
    c = build_tiny_model(tmp_path / "c", TinyModelSpec(seed=4))
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert sha256(a / name) == sha256(b / name), name
    assert sha256(a / "model.safetensors") != sha256(c / "model.safetensors")


def test_loads_in_transformers_with_chat_template(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen2"
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2 and tok.pad_token_id == 0
    chat = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    assert chat == "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(TEXTS[0], return_tensors="pt").input_ids
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 2048) and torch.isfinite(logits).all()


@pytest.mark.parametrize("text", TEXTS)
def test_raw_tokenizer_and_autotokenizer_agree(tiny_model_dir, text):
    """transformers swaps in Qwen2Tokenizer for qwen2 folders; ids must equal the raw tokenizer.json's."""
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert type(tok).__name__ == "Qwen2Tokenizer"
    ids = tok(text).input_ids
    assert ids == raw.encode(text).ids
    assert tok.decode(ids) == text  # byte-level BPE round-trips exactly

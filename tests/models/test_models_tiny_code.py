"""``tiny-code``: tiny-demo's shape with a tokenizer trained on the math corpus plus programming tasks. Its own cache
name (tiny-demo's is unchanged), ids identical in the raw tokenizer and transformers' Qwen2Tokenizer (so vLLM and the
trainer agree), and programs in far fewer tokens than with the math tokenizer."""

from __future__ import annotations

import dataclasses

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from reasonrl.data.code_tasks import CodeTaskSet
from reasonrl.models.tiny import CODE_SPEC, DEMO_SPEC, TinyModelSpec


@pytest.fixture(scope="module")
def folders():
    from reasonrl.config import offline_model_path

    return offline_model_path("tiny-demo"), offline_model_path("tiny-code")


def test_names_and_shapes():
    assert DEMO_SPEC.name == "tiny-qwen2-v2048-h256-i1024-l4-a4-kv2-p256-s0-b1"  # the math models' cache names stay
    assert CODE_SPEC.name == "tiny-qwen2-v2048-h256-i1024-l4-a4-kv2-p256-code-s0-b1"
    assert dataclasses.replace(CODE_SPEC, corpus="math") == DEMO_SPEC
    with pytest.raises(ValueError, match="corpus"):
        TinyModelSpec(corpus="poetry")


def test_code_tokenizer_agrees_with_transformers_and_is_shorter(folders):
    demo, code = folders
    rows = CodeTaskSet(train_size=200).rows("train")
    raw = Tokenizer.from_file(str(code / "tokenizer.json"))
    tok, math_tok = AutoTokenizer.from_pretrained(code), AutoTokenizer.from_pretrained(demo)
    assert type(tok).__name__ == "Qwen2Tokenizer"
    code_len = math_len = 0
    for r in rows:
        for text in (r["question"], r["answer"]):
            ids = tok(text, add_special_tokens=False).input_ids
            assert ids == raw.encode(text, add_special_tokens=False).ids and tok.decode(ids) == text
            code_len += len(ids)
            math_len += len(math_tok(text, add_special_tokens=False).input_ids)
    assert code_len < 0.7 * math_len, (code_len, math_len)
    assert tok.eos_token_id == math_tok.eos_token_id == 2 and tok.pad_token_id == 0

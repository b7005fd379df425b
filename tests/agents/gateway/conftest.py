"""Tokenizers with the chat templates the gateway is tested on, and a scripted backend.

No Qwen tokenizer ships offline, so the templates are written out (``templates/``: Qwen2.5's and Qwen3's, the
templates the Qwen models publish (Apache-2.0), byte for byte as TRL keeps them in ``trl/chat_templates/`` to recognise
those models; Qwen3's renders earlier assistant turns without their ``<think>`` block) and set on the tiny tokenizer
we build offline (ChatML special tokens, EOS ``<|im_end|>``). The plain ChatML case is SmolLM2's own
tokenizer and template (49k-token vocabulary, a system prompt added by the template) and the tiny model's own.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from reasonrl.agents.gateway.backend import TurnOutput, TurnSampling

TEMPLATES = Path(__file__).parent / "templates"


def _with_template(tokenizer, name: str):
    tok = copy.deepcopy(tokenizer)
    tok.chat_template = (TEMPLATES / f"{name}.jinja").read_text()
    return tok


@pytest.fixture(scope="session")
def qwen25_tokenizer(tiny_tokenizer):
    return _with_template(tiny_tokenizer, "qwen2_5")


@pytest.fixture(scope="session")
def qwen3_tokenizer(tiny_tokenizer):
    return _with_template(tiny_tokenizer, "qwen3")


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from transformers import AutoTokenizer

    from reasonrl.models import smollm2_path

    return AutoTokenizer.from_pretrained(smollm2_path())


@dataclasses.dataclass
class Call:
    session_id: str
    turn: int
    prompt_ids: list[int]
    sampling: TurnSampling


class ScriptedBackend:
    """A :class:`~reasonrl.agents.gateway.backend.TurnBackend` that answers each call with the next scripted text.

    The ids are *not* the tokenizer's encoding of the text: every character is encoded on its own (``char_level``),
    so any re-tokenisation of a model turn would show as different ids. EOS is appended unless the text is cut by
    ``sampling.max_tokens``. Log-probs are distinct per call and position."""

    def __init__(self, tokenizer, texts=(), *, char_level: bool = True, default: str = "ok"):
        self.tokenizer = tokenizer
        self.texts = list(texts)
        self.char_level = char_level
        self.default = default
        self.calls: list[Call] = []
        self.outputs: list[TurnOutput] = []

    def ids_of(self, text: str) -> list[int]:
        if not self.char_level:
            return list(self.tokenizer(text, add_special_tokens=False).input_ids)
        out: list[int] = []
        for ch in text:
            out.extend(self.tokenizer(ch, add_special_tokens=False).input_ids)
        return out

    def output(self, text: str, sampling: TurnSampling, turn: int) -> TurnOutput:
        ids = self.ids_of(text) + [self.tokenizer.eos_token_id]
        finish = "stop"
        if len(ids) > sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        logprobs = [-(turn + 1) - (i + 1) / 1000 for i in range(len(ids))]
        decoded = self.tokenizer.decode(ids, skip_special_tokens=True)
        return TurnOutput(ids, logprobs, decoded, finish, [turn] * len(ids))

    async def generate(self, session_id, turn, prompt_ids, sampling):
        self.calls.append(Call(session_id, turn, list(prompt_ids), sampling))
        text = self.texts.pop(0) if self.texts else self.default
        out = self.output(text, sampling, turn)
        self.outputs.append(out)
        return out


@pytest.fixture
def scripted():
    return ScriptedBackend

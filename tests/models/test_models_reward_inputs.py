"""A reward model with another tokenizer gets re-tokenised inputs; one with the policy's tokenizer gets the ids."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from reasonrl.models import smollm2_path
from reasonrl.models.reward_inputs import reward_model_encoder, same_vocabulary


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    return AutoTokenizer.from_pretrained(smollm2_path())


def test_same_tokenizer_passes_ids_through(tiny_tokenizer):
    assert same_vocabulary(tiny_tokenizer, tiny_tokenizer)
    assert reward_model_encoder(tiny_tokenizer, tiny_tokenizer) is None


def test_other_tokenizer_gets_the_same_text_in_its_own_ids(tiny_tokenizer, smollm2_tokenizer):
    assert not same_vocabulary(tiny_tokenizer, smollm2_tokenizer)
    encode = reward_model_encoder(tiny_tokenizer, smollm2_tokenizer)
    assert encode is not None
    prompt, response = "What is 12+30?", " The answer is 42."
    sample = (
        tiny_tokenizer(prompt, add_special_tokens=False).input_ids,
        tiny_tokenizer(response, add_special_tokens=False).input_ids,
    )
    ((p, r),) = encode([sample])
    assert p != sample[0] or r != sample[1]  # the ids really changed vocabulary
    assert smollm2_tokenizer.decode(p) == tiny_tokenizer.decode(sample[0])
    assert smollm2_tokenizer.decode(r) == tiny_tokenizer.decode(sample[1])
    ((_, empty),) = encode([(sample[0], [])])
    assert empty == [smollm2_tokenizer.eos_token_id]  # a last token to score

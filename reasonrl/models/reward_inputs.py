"""Token ids for a learned reward model whose tokenizer may differ from the policy's.

The rollout gives ``(prompt_ids, response_ids)`` in the POLICY's vocabulary. A reward model trained with another
tokenizer reads those ids as different words and returns a meaningless score, silently. :func:`reward_model_encoder`
compares the two tokenizers once: identical vocabularies pass the ids through; otherwise the texts are decoded with
the policy's tokenizer and encoded again with the reward model's (prompt and response separately, so the
response boundary is kept).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from loguru import logger

Sample = tuple[list[int], list[int]]


def same_vocabulary(a, b) -> bool:
    """True when both tokenizers map every token string to the same id (and have the same special tokens)."""
    return a.get_vocab() == b.get_vocab() and a.all_special_tokens == b.all_special_tokens


def reward_model_encoder(policy_tokenizer, reward_tokenizer) -> Callable[[Sequence[Sample]], list[Sample]] | None:
    """``None`` when the reward model reads the policy's ids as they are; else a function mapping policy samples
    to reward-model samples (decode with the policy's tokenizer, encode with the reward model's, no added
    special tokens; an empty response keeps one EOS token of the reward model so it has a last token to score)."""
    if same_vocabulary(policy_tokenizer, reward_tokenizer):
        return None
    logger.warning(
        f"the reward model's tokenizer ({type(reward_tokenizer).__name__}, {len(reward_tokenizer)} tokens) differs "
        f"from the policy's ({type(policy_tokenizer).__name__}, {len(policy_tokenizer)} tokens): responses are "
        "re-tokenised for the reward model (decode, then encode with its tokenizer)"
    )
    eos = reward_tokenizer.eos_token_id

    def encode(samples: Sequence[Sample]) -> list[Sample]:
        out = []
        for prompt_ids, response_ids in samples:
            prompt = policy_tokenizer.decode(prompt_ids, skip_special_tokens=False)
            response = policy_tokenizer.decode(response_ids, skip_special_tokens=False)
            p = reward_tokenizer(prompt, add_special_tokens=False).input_ids
            r = reward_tokenizer(response, add_special_tokens=False).input_ids
            out.append((p, r or ([eos] if eos is not None else [])))
        return out

    return encode

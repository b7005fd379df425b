"""SFT data: rows -> (prompt ids, response ids + EOS) pairs, held-out split, and the seeded batch order.

``response_field="messages"`` trains on conversations instead (:mod:`reasonrl.sft.conversation`): the sample is
``(prompt ids, response ids, loss mask)``, the response every turn after the prompt and the mask True on the
assistant turns only (tool results and turn headers are context, as in a multi-turn rollout).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from reasonrl.data.loader import DataFormatError
from reasonrl.data.templates import TemplateRenderError
from reasonrl.sft.config import SFTConfig
from reasonrl.utils.rng import derive_seed

# (prompt token ids, response token ids incl. EOS), or with a third entry: the loss mask over the response tokens
# (None: all of them), and a fourth for a vision-language row: its images (uint8 [H, W, 3] arrays; the prompt ids
# then hold the image tokens as the processor expands them)
Sample = tuple[list[int], list[int]] | tuple[list[int], list[int], list[bool] | None] | tuple[list, list, None, list]
CONVERSATION = "messages"  # the response_field of SFT on conversations


def trained_tokens(sample: Sample) -> int:
    """The response tokens a sample's loss counts: all of them, or those its loss mask keeps."""
    return sum(sample[2]) if len(sample) > 2 and sample[2] is not None else len(sample[1])


def encode_pairs(
    rows: Sequence[dict],
    tokenizer,
    template,
    *,
    response_field: str = "answer",
    max_prompt_len: int = 256,
    max_response_len: int = 256,
    where: str = "rows",
    processor=None,
) -> tuple[list[Sample], int]:
    """``(samples, dropped)``: per row ``(prompt_ids, response_ids + [eos])``, tokenized as the RL trainer tokenizes
    prompts (``template.render(row)``, no special tokens, left-truncated to ``max_prompt_len``). Rows whose response
    would exceed ``max_response_len`` tokens (EOS included) are dropped and counted. A row without a non-empty
    ``response_field``, or whose prompt renders empty, is a :class:`DataFormatError` naming the row (``where``
    names the data). ``response_field="messages"``: each row is a conversation, encoded with its loss mask
    (:func:`reasonrl.sft.conversation.encode_conversation`; ``template`` must be the chat template).

    A row with ``images`` (a vision-language model's ``processor`` given) is encoded by the processor, its image
    placeholders expanded into image tokens, never cut: longer than ``max_prompt_len`` is an error naming it."""
    eos = tokenizer.eos_token_id
    placeholder = _placeholder(processor)
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id: SFT targets must end with EOS so generation stops")
    if response_field == CONVERSATION:
        return _encode_conversations(rows, template, max_prompt_len, max_response_len, where)
    samples, dropped = [], 0
    for i, row in enumerate(rows):
        target = row.get(response_field)
        if not isinstance(target, (str, int, float)) or isinstance(target, bool) or not str(target).strip():
            raise DataFormatError(
                f"{where}: row {i} (id {row.get('id', '?')!r}) has no non-empty text in response_field="
                f"{response_field!r} (its fields: {sorted(row)}); set response_field to the field holding the target"
            )
        try:
            text = template.render(row)
        except TemplateRenderError as exc:
            raise DataFormatError(
                f"{where}: row {i}: {exc}; set prompt_field to the field holding the question"
            ) from None
        if row.get("images"):
            prompt = _image_prompt(row, i, text, processor, placeholder, max_prompt_len, where)
        else:
            prompt = tokenizer(text, add_special_tokens=False).input_ids[-max_prompt_len:]
        if not prompt:
            raise DataFormatError(
                f"{where}: row {i} (id {row.get('id', '?')!r}) renders to an empty prompt (fields: {sorted(row)}); "
                "set prompt_field to the field holding the question"
            )
        response = tokenizer(str(target).strip(), add_special_tokens=False).input_ids + [eos]
        if len(response) > max_response_len:
            dropped += 1
            continue
        samples.append((list(prompt), response, None, row["images"]) if row.get("images") else (list(prompt), response))
    return samples, dropped


def _placeholder(processor) -> str | None:
    """A vision-language processor's image placeholder (found once per encode: it renders the chat template)."""
    from reasonrl.models.vision import image_placeholder

    return None if processor is None else image_placeholder(processor)


def _image_prompt(
    row: dict, index: int, text: str, processor, placeholder: str | None, max_prompt_len: int, where: str
) -> list[int]:
    """The prompt ids of a row with images: the processor's, with each image's tokens expanded (as vLLM expands
    them in the rollout)."""
    from reasonrl.data.images import with_model_placeholder

    name = f"{where}: row {index} (id {row.get('id', '?')!r})"
    if processor is None:
        raise DataFormatError(f"{name} has images, but the model is not a vision-language model (no image processor)")
    text = with_model_placeholder(text, placeholder)
    ids = [int(t) for t in processor(text=[text], images=[list(row["images"])])["input_ids"][0]]
    if len(ids) > max_prompt_len:
        raise DataFormatError(
            f"{name}: its prompt is {len(ids)} tokens with its image tokens, over max_prompt_len={max_prompt_len}; "
            "raise max_prompt_len or shrink the images (max_pixels)"
        )
    return ids


def _encode_conversations(
    rows: Sequence[dict], template, max_prompt_len: int, max_response_len: int, where: str
) -> tuple[list[Sample], int]:
    from reasonrl.sft.conversation import encode_conversation

    samples, dropped = [], 0
    for i, row in enumerate(rows):
        try:
            prompt, response, mask = encode_conversation(row, template, max_prompt_len)
        except (ValueError, TemplateRenderError) as exc:  # ConversationError, a malformed messages value
            raise DataFormatError(f"{where}: row {i} (id {row.get('id', '?')!r}): {exc}") from None
        if len(response) > max_response_len:
            dropped += 1
            continue
        samples.append((prompt, response, mask))
    return samples, dropped


def _load(sources: Sequence[str], cfg: SFTConfig) -> list[dict]:
    """Rows of every source with ``cfg.prompt_field`` / ``cfg.response_field`` as the question / target (the
    loader maps them; ``answer_from="none"``: an SFT target is the full text, not an extracted final answer).
    ``response_field="messages"``: chat rows that keep their reply turns (``keep_reply``)."""
    from reasonrl.data import load_rows

    if cfg.response_field == CONVERSATION:
        fields = {"question": cfg.prompt_field}
        return [r for s in sources for r in load_rows(s, fields=fields, answer_from="none", keep_reply=True).rows]
    fields = {"question": cfg.prompt_field, "answer": cfg.response_field}
    rows = []
    for source in sources:
        for row in load_rows(source, fields=fields, answer_from="none").rows:
            prompt = {} if cfg.prompt_field == "messages" else {cfg.prompt_field: row["question"]}  # chat turns stay
            rows.append(row | prompt | {cfg.response_field: row["answer"]})
    return rows


def _with_question(rows: Sequence[dict], cfg: SFTConfig) -> list[dict]:
    """In-memory rows: the templates render ``question``, so copy ``prompt_field`` there when it is another name."""
    if cfg.prompt_field == "question":
        return list(rows)
    return [row | {"question": row[cfg.prompt_field]} if cfg.prompt_field in row else row for row in rows]


def split_rows(cfg: SFTConfig) -> tuple[list[dict], list[dict]]:
    """``(train_rows, eval_rows)`` from the config's data fields (see :class:`SFTConfig`). Without eval rows or
    eval data, ``min(eval_frac * N, eval_max_rows)`` rows of a seeded shuffle are held out (no row is wasted)."""
    if cfg.rows is not None:
        rows = _with_question(cfg.rows, cfg)
    elif cfg.generator is not None:
        rows = _with_question(list(cfg.generator()), cfg)
    else:
        rows = _load(cfg.train_data, cfg)
    if not rows:
        raise ValueError("SFT has no training rows: set rows, generator or train_data")
    if cfg.eval_rows is not None:
        return rows, _with_question(cfg.eval_rows, cfg)[: cfg.eval_max_rows]
    if cfg.eval_data:
        return rows, _load(cfg.eval_data, cfg)[: cfg.eval_max_rows]
    n = min(int(len(rows) * cfg.eval_frac), cfg.eval_max_rows)
    if not n:
        return rows, []
    held = set(random.Random(derive_seed(cfg.seed, "sft-eval-split")).sample(range(len(rows)), n))
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


def batch_order(num_samples: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
    """Sample indices of each optimizer step: epochs of a seeded shuffle (epoch ``e`` uses ``derive_seed(seed, e)``),
    cut into full batches (the last partial batch of an epoch is dropped), until ``steps`` batches."""
    if num_samples < batch_size:
        raise ValueError(f"train_batch_size={batch_size} exceeds the {num_samples} training pairs")
    out: list[list[int]] = []
    epoch = 0
    while len(out) < steps:
        order = list(range(num_samples))
        random.Random(derive_seed(seed, "sft-epoch", epoch)).shuffle(order)
        out += [order[i : i + batch_size] for i in range(0, num_samples - batch_size + 1, batch_size)]
        epoch += 1
    return out[:steps]

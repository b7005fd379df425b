"""SFT data: rows -> (prompt ids, response ids + EOS) pairs, held-out split, and the seeded batch order."""

from __future__ import annotations

import random
from collections.abc import Sequence

from reasonrl.data.loader import DataFormatError
from reasonrl.sft.config import SFTConfig
from reasonrl.utils.rng import derive_seed

Sample = tuple[list[int], list[int]]  # (prompt token ids, response token ids incl. EOS)


def encode_pairs(
    rows: Sequence[dict],
    tokenizer,
    template,
    *,
    response_field: str = "answer",
    max_prompt_len: int = 256,
    max_response_len: int = 256,
    where: str = "rows",
) -> tuple[list[Sample], int]:
    """``(samples, dropped)``: per row ``(prompt_ids, response_ids + [eos])``, tokenized as the RL trainer tokenizes
    prompts (``template.render(row)``, no special tokens, left-truncated to ``max_prompt_len``). Rows whose response
    would exceed ``max_response_len`` tokens (EOS included) are dropped and counted. A row without a non-empty
    ``response_field`` is a :class:`DataFormatError` naming the row (``where`` names the data)."""
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token_id: SFT targets must end with EOS so generation stops")
    samples, dropped = [], 0
    for i, row in enumerate(rows):
        target = row.get(response_field)
        if not isinstance(target, (str, int, float)) or isinstance(target, bool) or not str(target).strip():
            raise DataFormatError(
                f"{where}: row {i} (id {row.get('id', '?')!r}) has no non-empty text in response_field="
                f"{response_field!r} (its fields: {sorted(row)}); set response_field to the field holding the target"
            )
        prompt = tokenizer(template.render(row), add_special_tokens=False).input_ids[-max_prompt_len:]
        response = tokenizer(str(target), add_special_tokens=False).input_ids + [eos]
        if len(response) > max_response_len or not prompt:
            dropped += 1
            continue
        samples.append((list(prompt), response))
    return samples, dropped


def _load(sources: Sequence[str]) -> list[dict]:
    """Rows of every source, answers verbatim (``answer_from="none"``: an SFT target is the full text)."""
    from reasonrl.data import load_rows

    return [row for source in sources for row in load_rows(source, answer_from="none").rows]


def split_rows(cfg: SFTConfig) -> tuple[list[dict], list[dict]]:
    """``(train_rows, eval_rows)`` from the config's data fields (see :class:`SFTConfig`)."""
    if cfg.rows is not None:
        rows = list(cfg.rows)
    elif cfg.generator is not None:
        rows = list(cfg.generator())
    else:
        rows = _load(cfg.train_data)
    if not rows:
        raise ValueError("SFT has no training rows: set rows, generator or train_data")
    if cfg.eval_rows is not None:
        eval_rows = list(cfg.eval_rows)
    elif cfg.eval_data:
        eval_rows = _load(cfg.eval_data)
    else:
        n = int(len(rows) * cfg.eval_frac)
        rows, eval_rows = (rows[:-n], rows[-n:]) if n else (rows, [])
    return rows, eval_rows[: cfg.eval_max_rows]


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

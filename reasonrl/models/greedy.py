"""Greedy decoding with plain transformers, independent of vLLM and of the trainer: the demos' cross-check of the
trainer's held-out numbers."""

from __future__ import annotations

from pathlib import Path


def greedy_texts(
    model_path: str | Path,
    questions: list[str],
    max_new_tokens: int,
    batch_size: int = 256,
    images: list[list] | None = None,
) -> list[tuple[str, bool]]:
    """``(text, ended with EOS)`` of greedy decoding with plain transformers (independent of vLLM and of the trainer):
    prompts are the bare questions, left-padded, tokenized as the RL trainer tokenizes them. ``images``: each
    question's images (a vision-language model; its ``<image>`` placeholders are expanded by the processor)."""
    import torch
    from transformers import AutoTokenizer

    from reasonrl.models.vision import auto_model_class, load_processor, media_token_ids

    tok = AutoTokenizer.from_pretrained(model_path)
    model = auto_model_class(str(model_path)).from_pretrained(model_path, dtype=torch.float32).eval()
    processor = load_processor(model_path) if images is not None else None
    media = list(media_token_ids(model.config.to_dict()))
    texts = []
    for lo in range(0, len(questions), batch_size):
        pixels: dict = {}
        if processor is not None:
            batch_images = [list(i) for i in images[lo : lo + batch_size]]
            enc = processor(text=questions[lo : lo + batch_size], images=batch_images)
            ids = [list(x) for x in enc["input_ids"]]
            pixels = {k: torch.as_tensor(v) for k, v in enc.items() if k not in ("input_ids", "attention_mask")}
        else:
            ids = [tok(q, add_special_tokens=False).input_ids for q in questions[lo : lo + batch_size]]
        width = max(map(len, ids))
        input_ids = torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in ids])  # [batch, width]
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                suppress_tokens=media or None,  # as the engines: an image token is never text
                **pixels,
            )
        for seq in out[:, width:].tolist():
            finished = tok.eos_token_id in seq
            texts.append((tok.decode(seq[: seq.index(tok.eos_token_id)] if finished else seq), finished))
    return texts

"""Checks of a vision-language run, before anything starts (called by ``exp_hooks.build_inputs``).

EasyR1's most common failure is vLLM or the trainer stopping mid-run with "image features and image tokens do not
match": a prompt whose image tokens were cut by ``max_prompt_length``, because its images were larger than the
budget assumed. Here every prompt's length WITH its image tokens is computed before start-up (the processor's count
for each distinct image size, plus the text's tokens), and a prompt over ``max_prompt_len`` is refused with the
numbers and the two fields that fix it (``max_prompt_len``, ``max_pixels``). Prompts with images are never cut.

Also refused here, with the reason: images in a text model's run; prompts without an image in a vision-language run
(every rank's micro-batches must run the vision tower: ZeRO-3 gathers its layers collectively, and Idefics3's
forward cannot mix rows with and without images); and what the vision path does not do yet (a learned reward model
on a VLM, multi-turn environments with images); ``freeze_vision_tower`` on a text model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reasonrl.data.images import with_model_placeholder


def vision_problems(
    cfg, tokenizer, template, sets: Mapping[str, Sequence[dict]], *, training: bool = True
) -> list[str]:
    """Every problem of the run's rows and fields with images (module docstring); ``sets``: name -> rows.
    ``training=False`` (the eval CLI): the rows and lengths only, not the training roles."""
    with_images = {name: next((r for r in rows if r.get("images")), None) for name, rows in sets.items()}
    is_vlm = cfg.is_vision_model
    problems: list[str] = []
    if not is_vlm:
        if cfg.freeze_vision_tower:
            problems.append(f"freeze_vision_tower: pretrain={cfg.pretrain!r} is a text model (no vision tower)")
        for name, row in with_images.items():
            if row is not None:
                problems.append(
                    f"{name}: row {row.get('id', '?')!r} has images, but pretrain={cfg.pretrain!r} is a text model "
                    "(its config has no vision_config): use a vision-language model (docs/vision.md)"
                )
        return problems
    unsupported = {
        "reward_pretrain": (
            cfg.use_reward_model,
            "a learned reward model is not supported in a vision-language run "
            "yet (it would score responses without their images): use a rule reward",
        ),
        "env_fn": (
            getattr(cfg, "env_fn", None) is not None,
            "multi-turn environments with images are not supported yet",
        ),
        "agent_fn": (
            getattr(cfg, "agent_fn", None) is not None,
            "agent programs with images are not supported yet (the gateway renders text chat messages only)",
        ),
        "fully_async": (
            getattr(cfg, "fully_async", False),
            "fully asynchronous RL does not support a vision-language model yet (vLLM 0.32 cannot drop the vision "
            "encoder's cache while requests run, and new weights would meet stale image features): set "
            "fully_async=false",
        ),
    }
    problems += [f"{field}: {why}" for field, (bad, why) in unsupported.items() if bad and training]
    for name, rows in sets.items():
        missing = next((r for r in rows if not r.get("images")), None)
        if missing is not None:
            problems.append(
                f"{name}: row {missing.get('id', '?')!r} has no image; in a vision-language run every prompt needs at "
                "least one (each rank's forward runs the vision tower, a collective under ZeRO-3): give it an image "
                "or train text rows in a separate run"
            )
    if not problems:
        problems += _length_problems(cfg, tokenizer, template, sets)
    return problems


def _length_problems(cfg, tokenizer, template, sets: Mapping[str, Sequence[dict]]) -> list[str]:
    """Prompts longer than ``max_prompt_len`` once their images are expanded (the first of each set, and how many)."""
    from reasonrl.models.vision import image_placeholder, load_processor

    processor = load_processor(cfg.resolve_model_path(cfg.pretrain))
    placeholder = image_placeholder(processor)
    placeholder_len = len(tokenizer(placeholder, add_special_tokens=False).input_ids)
    per_size: dict[tuple[int, ...], int] = {}

    def image_tokens(image: Any) -> int:
        shape = tuple(image.shape)
        if shape not in per_size:  # the processor's expansion of one placeholder for an image of this size
            ids = processor(text=[placeholder], images=[[image]])["input_ids"][0]
            per_size[shape] = len(ids)
        return per_size[shape]

    text_lengths: dict[str, int] = {}  # rendered prompt -> its tokens (rows often share their text)

    def text_tokens(row: dict) -> int:
        text = template.render(row)
        if text not in text_lengths:
            shown = with_model_placeholder(text, placeholder)
            text_lengths[text] = len(tokenizer(shown, add_special_tokens=False).input_ids)
        return text_lengths[text]

    problems = []
    for name, rows in sets.items():
        over, first = 0, None
        for row in rows:
            images = row["images"]
            from_images = sum(image_tokens(im) for im in images)
            length = text_tokens(row) - len(images) * placeholder_len + from_images
            if length > cfg.max_prompt_len:
                over += 1
                if first is None:
                    sizes = ", ".join(f"{im.shape[1]}x{im.shape[0]}" for im in images)
                    first = (row.get("id", "?"), length, from_images, sizes)
        if first is not None:
            row_id, length, from_images, sizes = first
            problems.append(
                f"{name}: {over} prompt(s) exceed max_prompt_len={cfg.max_prompt_len} with their image tokens, e.g. "
                f"row {row_id!r}: {length} tokens, {from_images} of them from its image(s) of {sizes} pixels. Raise "
                f"max_prompt_len to at least {length} (and vllm_max_model_len with it), or lower max_pixels "
                f"(now {cfg.max_pixels}) so that images take fewer tokens; prompts with images are never cut"
            )
    return problems

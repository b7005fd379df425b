"""Vision-language models: what a forward pass needs besides token ids, for every family we train.

A vision-language model (VLM) is a folder whose ``config.json`` has a ``vision_config``. Its prompts hold image
tokens: the chat template writes one placeholder per image (``<image>`` for Idefics3 / SmolVLM,
``<|vision_start|><|image_pad|><|vision_end|>`` for Qwen2-VL), and the processor (transformers) or vLLM expands
each placeholder into the image's tokens. The trainer's samples carry the EXPANDED prompt ids (what vLLM returns),
so a forward pass needs only the images' pixel inputs besides them:

* Idefics3 / SmolVLM: ``pixel_values`` ``[batch, images, 3, H, W]`` (zero images pad a row with fewer) and
  ``pixel_attention_mask`` ``[batch, images, H, W]``; 1-D positions as for a text model.
* Qwen2-VL / Qwen2.5-VL: ``pixel_values`` ``[patches, C * temporal * patch**2]`` (every image of the batch, in
  order) and ``image_grid_thw`` ``[images, 3]``. Their rotary positions are 3-D (time, height, width) and follow
  the image grids, so the model computes them itself from ``input_ids``, ``image_grid_thw`` and the attention mask:
  ``position_ids`` is not passed (``rope_positions_from_model``). Packing several sequences into one row would
  need per-sequence 3-D positions: VLM micro-batches are padded, never packed.

:class:`VisionInputs` runs the model's own image processor on the images of a micro-batch (uint8 ``[H, W, 3]``
arrays, one list per sample, in prompt order), so the pixels the trainer sees are the ones vLLM's copy of the same
processor gives the engines.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

# model_type of the families whose rotary positions are 3-D and computed by the model from the image grids
MROPE_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
# last name of the image encoder's module: Idefics3 / SmolVLM ``model.vision_model`` (its connector is apart),
# Qwen2-VL ``model.visual`` (its merger, the connector, inside), LLaVA-style ``vision_tower``
VISION_TOWER_NAMES = ("vision_model", "visual", "vision_tower")


def vision_tower_prefixes(model) -> list[str]:
    """Module-name prefixes (``"model.vision_model."``) of the model's image encoder: the shallowest modules whose
    last name is one of :data:`VISION_TOWER_NAMES`."""
    found: list[str] = []
    for name, _ in model.named_modules():
        if name.rsplit(".", 1)[-1] in VISION_TOWER_NAMES and not any(name.startswith(p) for p in found):
            found.append(name + ".")
    return found


def freeze_vision_tower(model) -> int:
    """Stop the image encoder's parameters from training (``requires_grad=False``); returns how many tensors.
    ValueError when the model has no module named as an image encoder."""
    prefixes = vision_tower_prefixes(model)
    if not prefixes:
        raise ValueError(f"freeze_vision_tower: no vision tower ({', '.join(VISION_TOWER_NAMES)}) in this model")
    frozen = 0
    for name, param in model.named_parameters():
        if name.startswith(tuple(prefixes)):
            param.requires_grad_(False)
            frozen += 1
    return frozen


def read_config(model_path: str | Path) -> dict[str, Any]:
    """The model folder's ``config.json`` as a dict ({} when there is none)."""
    path = Path(model_path) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def is_vision_model(model_path: str | Path) -> bool:
    """Whether the model folder holds a vision-language model (its config has a ``vision_config``)."""
    return "vision_config" in read_config(model_path)


def image_token_id(model_path: str | Path) -> int | None:
    """The id of the token that stands for image features in the expanded prompt (``image_token_id`` or
    ``image_token_index`` of the config), None when the config names none."""
    config = read_config(model_path)
    value = config.get("image_token_id", config.get("image_token_index"))
    return None if value is None else int(value)


def media_token_ids(config: dict[str, Any]) -> tuple[int, ...]:
    """The ids that stand for image or video features in a VLM's prompts (``image_token_id`` /
    ``image_token_index`` / ``video_token_id`` / ``video_token_index`` of its config dict): never text, so never
    sampled (a sampled one would be merged with image features by every later forward)."""
    keys = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")
    return tuple(sorted({int(config[k]) for k in keys if config.get(k) is not None}))


def auto_model_class(model_path_or_config):
    """The transformers auto class that loads a model (a folder, or a config object) with its LM head:
    ``AutoModelForImageTextToText`` for a VLM (``AutoModelForCausalLM`` does not map them), else
    ``AutoModelForCausalLM``."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    if isinstance(model_path_or_config, (str, Path)):
        vision = is_vision_model(model_path_or_config)
    else:
        vision = getattr(model_path_or_config, "vision_config", None) is not None
    return AutoModelForImageTextToText if vision else AutoModelForCausalLM


def load_processor(model_path: str | Path):
    """The model's ``AutoProcessor`` (tokenizer + image processor + chat template)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(model_path))


def save_tokenizer_files(tokenizer, model_path: str | Path | None, out_dir: str | Path) -> None:
    """Write ``tokenizer`` into an exported model folder, and for a vision-language model its processor too (image
    processor settings, chat template), so that the folder loads with ``AutoProcessor`` and in vLLM."""
    tokenizer.save_pretrained(out_dir)
    if model_path is not None and is_vision_model(model_path):
        load_processor(model_path).save_pretrained(out_dir)


def image_placeholder(processor) -> str:
    """The text the processor's chat template writes for one image part (what vLLM expands): the difference between
    a user turn holding an image and a text marker and the same turn holding the marker alone."""
    marker = "\u2063MARK\u2063"
    with_image = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": marker}]}]
    without = [{"role": "user", "content": [{"type": "text", "text": marker}]}]
    a = processor.apply_chat_template(with_image, tokenize=False)
    b = processor.apply_chat_template(without, tokenize=False)
    prefix_len = len(b.split(marker)[0])
    if not a.startswith(b[:prefix_len]) or marker not in a:
        raise ValueError("cannot find the image placeholder of this processor's chat template")
    return a[prefix_len : a.index(marker)]


class VisionInputs:
    """The pixel inputs of a VLM's forward pass for a micro-batch's images (module docstring).

    Args:
        model_path: the VLM folder (its processor and config are read here, once).
    """

    def __init__(
        self,
        model_path: str | Path | None,
        *,
        model_type: str | None = None,
        image_processor=None,
        image_token: int | None = None,
    ):
        """From a model folder (its config's ``model_type`` and image token, its processor), or from
        ``model_type``, an ``image_processor`` and the ``image_token`` id given (a family whose full processor
        cannot be built here: Qwen2-VL's needs torchvision for its video part)."""
        self.processor = None
        if model_path is not None:
            self.model_type = read_config(model_path).get("model_type", "")
            self.image_token = image_token_id(model_path)
            self.processor = load_processor(model_path)
            self.image_processor = self.processor.image_processor
        else:
            self.model_type, self.image_processor, self.image_token = str(model_type), image_processor, image_token

    def dummy_sample(self, pad_token_id: int) -> tuple[tuple[list[int], list[int]], list]:
        """``((prompt_ids, response_ids), images)`` of a one-image prompt (a black 32 x 32 image, expanded by the
        processor) with a one-token response: the zero-weighted micro-batch of a rank with nothing to do, which
        still runs the vision tower as the other ranks do."""
        import numpy as np

        blank = np.zeros((32, 32, 3), dtype=np.uint8)
        ids = self.processor(text=[image_placeholder(self.processor)], images=[[blank]])["input_ids"][0]
        return ([int(t) for t in ids], [int(pad_token_id)]), [blank]

    @property
    def rope_positions_from_model(self) -> bool:
        """Whether the model computes its own (3-D) positions: ``position_ids`` must not be passed."""
        return self.model_type in MROPE_MODEL_TYPES

    def __call__(
        self, images: Sequence[Sequence[Any]], input_ids: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Model kwargs for ``images[i]``, the images of sample ``i`` of the micro-batch (uint8 ``[H, W, 3]``
        arrays or PIL images, in prompt order). Empty when no sample has an image. The Qwen2-VL family also needs
        the batch's ``input_ids`` [batch, S]: its 3-D positions follow ``mm_token_type_ids`` [batch, S] (1 on the
        image tokens, 0 elsewhere), which transformers asks for beside the grids."""
        from PIL import Image

        per_sample = [[_pil(Image, im) for im in sample] for sample in images]
        if not any(per_sample):
            return {}
        if self.model_type in MROPE_MODEL_TYPES:  # flat patches of every image, in order, with their grids
            if input_ids is None or self.image_token is None:
                raise ValueError(f"{self.model_type}: the 3-D positions need the input ids and the image token id")
            flat = [im for sample in per_sample for im in sample]
            out = self.image_processor(images=flat, return_tensors="pt")
            types = (input_ids == self.image_token).to(torch.int32)  # [batch, S]
            return {
                "pixel_values": out["pixel_values"],
                "image_grid_thw": out["image_grid_thw"],
                "mm_token_type_ids": types,
            }
        if any(not sample for sample in per_sample):
            raise ValueError(
                f"{self.model_type}: a micro-batch mixes samples with and without images; every prompt of a "
                "vision-language run needs at least one image"
            )
        out = self.image_processor(images=per_sample, return_tensors="pt")
        return {k: v for k, v in out.items() if k in ("pixel_values", "pixel_attention_mask")}


def _pil(image_module, image):
    if isinstance(image, image_module.Image):
        return image.convert("RGB")
    return image_module.fromarray(image).convert("RGB")

"""Images of vision-language rows: read, checked and sized once, when the data is loaded.

A row's ``images`` field (EasyR1's row format: ``prompt``, ``answer``, ``images``, the prompt holding one ``<image>``
placeholder per image) is a list whose entries are any of:

* a path, relative to the data file's folder (or absolute);
* raw encoded bytes (PNG, JPEG, ...), as parquet files and Hub datasets store them;
* a dict ``{"bytes": ..., "path": ...}`` (the ``datasets`` ``Image`` feature): its bytes, else its path;
* an already decoded ``PIL.Image.Image``.

:func:`load_row_images` decodes every entry to an RGB ``PIL.Image`` (a missing, unreadable or undecodable image is an
error naming the file and the row) and fits it into ``[min_pixels, max_pixels]`` (:func:`fit_pixels`), so that the
rollout engines and every forward pass see the same pixels. EasyR1 resizes the same way before its processor.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

IMAGE_PLACEHOLDER = "<image>"  # in a row's prompt text: where each image goes, in order


def with_model_placeholder(text: str, placeholder: str | None) -> str:
    """``text`` with each ``<image>`` written as the model's own image placeholder (``placeholder``, what its chat
    template writes: ``<|vision_start|><|image_pad|><|vision_end|>`` for Qwen2-VL); unchanged when that is
    ``<image>`` too or None (a text-only model)."""
    if placeholder is None or placeholder == IMAGE_PLACEHOLDER:
        return text
    return text.replace(IMAGE_PLACEHOLDER, placeholder)


class ImageError(ValueError):
    """An image of a row could not be read or decoded; the message names the file (or entry) and the row."""


def fit_pixels(image, min_pixels: int | None = None, max_pixels: int | None = None):
    """``image`` scaled (aspect ratio kept) so that ``width * height`` lies in ``[min_pixels, max_pixels]``;
    unchanged when it already does. Each side stays at least 1 pixel."""
    pixels = image.width * image.height
    factor = 1.0
    if max_pixels is not None and pixels > max_pixels:
        factor = math.sqrt(max_pixels / pixels)
    elif min_pixels is not None and pixels < min_pixels:
        factor = math.sqrt(min_pixels / pixels)
    if factor == 1.0:
        return image
    size = (max(1, int(image.width * factor)), max(1, int(image.height * factor)))
    return image.resize(size, resample=_bicubic())


def _bicubic():
    from PIL import Image

    return Image.Resampling.BICUBIC


def decode_image(entry: Any, base_dir: Path | None, where: str):
    """One ``images`` entry -> an RGB ``PIL.Image`` (see the module docstring); ``ImageError`` naming ``where``."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(entry, Image.Image):
        return entry.convert("RGB")
    if isinstance(entry, dict):
        data, path = entry.get("bytes"), entry.get("path")
        if data is None and path is None:
            raise ImageError(f"{where}: an image entry has neither 'bytes' nor 'path' ({sorted(entry)})")
        entry = data if data is not None else path
    if isinstance(entry, (bytes, bytearray, memoryview)):
        label, source = "image bytes", io.BytesIO(bytes(entry))
    elif isinstance(entry, (str, os.PathLike)):
        path = Path(entry).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        label, source = f"image file {str(path)!r}", path
        if not path.is_file():
            raise ImageError(f"{where}: {label} does not exist (paths are relative to the data file's folder)")
    else:
        raise ImageError(
            f"{where}: an image entry must be a path, bytes, a {{'bytes', 'path'}} dict or a PIL image, "
            f"got {type(entry).__name__}"
        )
    try:
        with Image.open(source) as image:
            image.load()
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise ImageError(f"{where}: {label} cannot be decoded as an image ({exc})") from None


def load_row_images(
    row: dict,
    base_dir: Path | None,
    where: str,
    *,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    max_images: int | None = None,
) -> list:
    """The decoded, fitted images of ``row["images"]`` (see the module docstring). The prompt must hold one
    ``<image>`` placeholder per image; ``where`` names the row in errors."""
    entries = row.get("images")
    if entries is None:
        return []
    if not isinstance(entries, (list, tuple)):
        entries = [entries]  # a single image
    if max_images is not None and len(entries) > max_images:
        raise ImageError(f"{where}: {len(entries)} images, more than max_images_per_prompt={max_images}")
    placeholders = prompt_text(row).count(IMAGE_PLACEHOLDER)
    if placeholders != len(entries):
        raise ImageError(
            f"{where}: the prompt has {placeholders} {IMAGE_PLACEHOLDER} placeholder(s) for {len(entries)} image(s); "
            f"put one {IMAGE_PLACEHOLDER} where each image goes"
        )
    return [fit_pixels(decode_image(e, base_dir, where), min_pixels, max_pixels) for e in entries]


def prompt_text(row: dict) -> str:
    """The text a row's placeholders live in: its question, or its chat turns' text."""
    messages = row.get("messages")
    if messages:
        return "".join(m.get("content", "") for m in messages if isinstance(m.get("content"), str))
    return str(row.get("question", ""))


def image_arrays(images: Sequence) -> list:
    """``uint8 [H, W, 3]`` numpy arrays of PIL images (what travels to the workers and the engines)."""
    import numpy as np

    return [np.asarray(image.convert("RGB"), dtype=np.uint8) for image in images]


def images_fingerprint(images: Sequence) -> str:
    """A digest of decoded images (uint8 arrays): equal pictures, equal fingerprints."""
    import hashlib

    import numpy as np

    digest = hashlib.sha1()
    for image in images:
        array = np.ascontiguousarray(image)
        digest.update(f"{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()

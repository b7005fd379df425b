"""Vision-language forwards: pixel inputs from the model's own processor, padded batches equal to one sample alone
(Idefics3: the CPU test model; Qwen2-VL: its 3-D rotary positions and image grids, on a tiny random model built from
a config), and the frozen vision tower.

Tolerance of "padded = alone" (atol 2e-5): both are float32 forwards of the same model with other shapes (padding,
batch rows), so sums run in another order; measured at most 4.8e-7 on log-probs up to |7| (also with torch, oneDNN
and MKL limited to AVX2 and one thread). A picture that does not reach its own tokens moves them by far more: another
picture moved the tiny Idefics3's log-probs by 0.31.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from reasonrl.models import pad_batch, response_logprobs
from reasonrl.models.vision import (
    VisionInputs,
    auto_model_class,
    freeze_vision_tower,
    image_placeholder,
    is_vision_model,
    load_processor,
    vision_tower_prefixes,
)


@pytest.fixture(scope="module")
def tiny_vlm_dir():
    from reasonrl.models.tiny_vlm import tiny_vlm_path

    return tiny_vlm_path()


def _pictures(seed: int, sizes):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]


def test_the_tiny_vlm_is_a_vision_model_and_loads_with_its_image_text_class(tiny_vlm_dir, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    assert is_vision_model(tiny_vlm_dir) and not is_vision_model(tiny_model_dir)
    assert auto_model_class(tiny_vlm_dir) is AutoModelForImageTextToText
    assert auto_model_class(tiny_model_dir) is AutoModelForCausalLM
    assert image_placeholder(load_processor(tiny_vlm_dir)) == "<image>"


def test_pixel_inputs_are_the_processors_own(tiny_vlm_dir):
    images = _pictures(0, [(56, 56), (40, 56), (20, 30)])
    processor = load_processor(tiny_vlm_dir)
    expected = processor(text=["<image>a", "<image>b", "<image>c"], images=[[im] for im in images], return_tensors="pt")
    got = VisionInputs(tiny_vlm_dir)([[im] for im in images])
    assert set(got) == {"pixel_values", "pixel_attention_mask"}
    assert torch.equal(got["pixel_values"], expected["pixel_values"])
    assert torch.equal(got["pixel_attention_mask"], expected["pixel_attention_mask"])
    assert VisionInputs(tiny_vlm_dir)([[], []]) == {}  # no image at all: a text-only forward


def test_a_batch_mixing_rows_with_and_without_images_is_refused_for_idefics3(tiny_vlm_dir):
    with pytest.raises(ValueError, match="mixes samples with and without images"):
        VisionInputs(tiny_vlm_dir)([_pictures(0, [(56, 56)]), []])


def test_padded_idefics3_batch_scores_each_sample_as_alone(tiny_vlm_dir, one_thread):
    """Left-padded prompts of different lengths, each with its picture: the batch's log-probs equal each sample's
    own forward (the image tokens stay aligned with their features)."""
    processor = load_processor(tiny_vlm_dir)
    model = auto_model_class(tiny_vlm_dir).from_pretrained(tiny_vlm_dir, dtype=torch.float32).eval()
    vision = VisionInputs(tiny_vlm_dir)
    images = [[im] for im in _pictures(1, [(56, 56), (30, 50)])]
    texts = ["<image>How many dots?", "Count them: <image> now, how many dots are there?"]
    prompts = [list(processor(text=[t], images=[i])["input_ids"][0]) for t, i in zip(texts, images, strict=True)]
    samples = [(prompts[0], [12, 40, 7]), (prompts[1], [5, 9])]
    batch = pad_batch(samples, 0)
    batch = dataclasses.replace(batch, vision=vision(images))
    with torch.no_grad():
        together, _ = response_logprobs(model, batch)
        for i, sample in enumerate(samples):
            alone = dataclasses.replace(pad_batch([sample], 0), vision=vision([images[i]]))
            one, _ = response_logprobs(model, alone)
            n = len(sample[1])
            torch.testing.assert_close(together[i, :n], one[0, :n], atol=2e-5, rtol=0)
    # and the picture matters: another picture gives other log-probs
    other = dataclasses.replace(pad_batch(samples[:1], 0), vision=vision([[_pictures(9, [(56, 56)])[0]]]))
    with torch.no_grad():
        changed, _ = response_logprobs(model, other)
    assert (changed[0, :3] - together[0, :3]).abs().max() > 1e-4


def test_freeze_vision_tower_freezes_the_image_encoder_only(tiny_vlm_dir):
    model = auto_model_class(tiny_vlm_dir).from_pretrained(tiny_vlm_dir, dtype=torch.float32)
    assert vision_tower_prefixes(model) == ["model.vision_model."]
    frozen = freeze_vision_tower(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert frozen > 0 and not any(n.startswith("model.vision_model.") for n in trainable)
    assert any(n.startswith("model.connector.") for n in trainable) and "lm_head.weight" in trainable


def test_freeze_vision_tower_on_a_text_model_is_refused(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with pytest.raises(ValueError, match="no vision tower"):
        freeze_vision_tower(model)


# ---------------------------------------------------------------------------------------------- Qwen2-VL family
# vLLM cannot serve it on this CPU stack (its processor needs torchvision), but transformers runs a tiny random one:
# what is specific to the family (flat patches with grid sizes, 3-D rotary positions computed by the model) is
# checked here.
QWEN_TOKENS = {"vision_start": 150, "image_pad": 151, "vision_end": 152}


@pytest.fixture(scope="module")
def tiny_qwen2_vl():
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessorPil

    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=160,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0},
        ),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, patch_size=14, spatial_merge_size=2),
        image_token_id=QWEN_TOKENS["image_pad"],
        vision_start_token_id=QWEN_TOKENS["vision_start"],
        vision_end_token_id=QWEN_TOKENS["vision_end"],
    )
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).eval()
    processor = Qwen2VLImageProcessorPil(min_pixels=28 * 28 * 4, max_pixels=28 * 28 * 16)
    vision = VisionInputs(None, model_type="qwen2_vl", image_processor=processor, image_token=QWEN_TOKENS["image_pad"])
    return model, vision


def _qwen_prompt(grid_thw, text_before, text_after):
    tokens = int(grid_thw.prod()) // 4  # merged 2 x 2 patches per image token
    v = QWEN_TOKENS
    return [*text_before, v["vision_start"], *[v["image_pad"]] * tokens, v["vision_end"], *text_after]


def test_qwen2_vl_pixel_inputs_are_flat_patches_with_grids(tiny_qwen2_vl):
    _, vision = tiny_qwen2_vl
    assert vision.rope_positions_from_model
    ids = torch.tensor([[1, QWEN_TOKENS["image_pad"], 2], [QWEN_TOKENS["image_pad"], 3, QWEN_TOKENS["image_pad"]]])
    out = vision([_pictures(0, [(56, 84)]), _pictures(1, [(56, 112), (56, 56)])], ids)  # sizes within its bounds
    assert set(out) == {"pixel_values", "image_grid_thw", "mm_token_type_ids"}
    assert out["mm_token_type_ids"].tolist() == [[0, 1, 0], [1, 0, 1]]
    assert out["image_grid_thw"].tolist() == [[1, 4, 6], [1, 4, 8], [1, 4, 4]]  # (time, height, width) in patches
    assert out["pixel_values"].shape[0] == int(out["image_grid_thw"].prod(dim=1).sum())


def test_qwen2_vl_padded_batch_with_model_positions_scores_each_sample_as_alone(tiny_qwen2_vl, one_thread):
    """Two left-padded prompts with pictures of different sizes: with ``position_ids=None`` the model computes the
    3-D rotary positions from the image grids and the attention mask, and each sample scores as when alone. Passing
    the 1-D positions a text model gets instead changes the log-probs: they are not what the model trained with."""
    model, vision = tiny_qwen2_vl
    images = [_pictures(2, [(56, 84)]), _pictures(3, [(56, 56)])]
    grids = [vision.image_processor(images=im, return_tensors="pt")["image_grid_thw"][0] for im in images]
    samples = [
        (_qwen_prompt(grids[0], [10, 11], [12, 13, 14]), [20, 21, 22]),
        (_qwen_prompt(grids[1], [10, 11, 30, 31, 32, 33], [12]), [23, 24]),
    ]

    def scored(batch_samples, batch_images, model_positions=True):
        batch = pad_batch(batch_samples, 0)
        positions = None if model_positions else batch.position_ids
        batch = dataclasses.replace(batch, vision=vision(batch_images, batch.input_ids), position_ids=positions)
        with torch.no_grad():
            return response_logprobs(model, batch, use_logits_to_keep=False)[0]

    together = scored(samples, images)
    for i, sample in enumerate(samples):
        alone = scored([sample], [images[i]])
        n = len(sample[1])
        torch.testing.assert_close(together[i, :n], alone[0, :n], atol=2e-5, rtol=0)
    text_positions = scored(samples, images, model_positions=False)
    assert (text_positions[0, :3] - together[0, :3]).abs().max() > 1e-4


def test_lora_with_a_frozen_tower_puts_no_adapter_in_it(tiny_vlm_dir):
    from reasonrl.models.lora import LoraSettings, add_adapters

    model = auto_model_class(tiny_vlm_dir).from_pretrained(tiny_vlm_dir, dtype=torch.float32)
    freeze_vision_tower(model)
    settings = LoraSettings(rank=4, alpha=8, exclude_prefixes=tuple(vision_tower_prefixes(model)))
    adapted = add_adapters(model, settings)
    lora = [n for n, _ in adapted.named_parameters() if "lora_" in n]
    assert lora and not any(".vision_model." in n for n in lora)
    assert any(".text_model." in n for n in lora)
    trainable = [n for n, p in adapted.named_parameters() if p.requires_grad]
    assert set(trainable) == set(lora)


def test_a_vlm_critic_reads_the_pictures_and_scores_each_sample_as_alone(tiny_vlm_dir, one_thread):
    """The critic's backbone is the VLM without its LM head (vision tower and connector included): its values take
    the batch's pixel inputs, per sample as when alone, and change with the picture."""
    from reasonrl.models import load_critic, response_values

    critic = load_critic(tiny_vlm_dir).eval()
    processor = load_processor(tiny_vlm_dir)
    vision = VisionInputs(tiny_vlm_dir)
    images = [[im] for im in _pictures(4, [(56, 56), (44, 56)])]
    texts = ["<image>How many dots?", "Count: <image> how many?"]
    prompts = [list(processor(text=[t], images=[i])["input_ids"][0]) for t, i in zip(texts, images, strict=True)]
    samples = [(prompts[0], [12, 40, 7]), (prompts[1], [5, 9])]
    with torch.no_grad():
        together = response_values(critic, dataclasses.replace(pad_batch(samples, 0), vision=vision(images)))
        for i, sample in enumerate(samples):
            alone = response_values(critic, dataclasses.replace(pad_batch([sample], 0), vision=vision([images[i]])))
            torch.testing.assert_close(together[i, : len(sample[1])], alone[0, : len(sample[1])], atol=2e-5, rtol=0)
        other = [[_pictures(8, [(56, 56)])[0]]]
        moved = response_values(critic, dataclasses.replace(pad_batch(samples[:1], 0), vision=vision(other)))
    assert (moved[0, :3] - together[0, :3]).abs().max() > 1e-6

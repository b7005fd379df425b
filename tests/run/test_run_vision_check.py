"""Checks of a vision-language run before anything starts (no Ray): prompts too long once their image tokens are
counted (EasyR1's "image features and image tokens do not match"), pictures for a text model, prompts without a
picture, and what the image path does not do yet; each names the field or row and what to do."""

from __future__ import annotations

import time

import pytest

from playground.vision_grpo_cpu import VisionGRPOCPUConfig
from reasonrl.config import ConfigError
from reasonrl.exp import BasePPOExp
from reasonrl.run.exp_hooks import build_inputs


def refusal(cfg, exp_cls=BasePPOExp) -> str:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.resolve_model_path(cfg.pretrain))
    with pytest.raises(ConfigError) as err:
        build_inputs(exp_cls(cfg), tokenizer)
    return str(err.value)


def vision_cfg(**fields):
    return VisionGRPOCPUConfig(pretrain="tiny-vlm", **fields)


def processor_length(cfg, row) -> tuple[int, int]:
    """(prompt tokens, image tokens) of ``row`` as the model's processor expands it (what vLLM gives the trainer)."""
    from reasonrl.models.vision import load_processor

    processor = load_processor(cfg.resolve_model_path(cfg.pretrain))
    ids = list(processor(text=[row["question"]], images=[row["images"]])["input_ids"][0])
    text_only = processor.tokenizer(row["question"].replace("<image>", ""), add_special_tokens=False).input_ids
    return len(ids), len(ids) - len(text_only)


def test_a_prompt_too_long_with_its_image_tokens_names_both_fixes():
    cfg = vision_cfg(max_prompt_len=20, vllm_max_model_len=64)
    start = time.perf_counter()
    text = refusal(cfg)
    seconds = time.perf_counter() - start
    first = BasePPOExp(cfg).load_train_rows()[0]
    length, from_images = processor_length(cfg, first)
    assert length > 20
    assert "train_data: 4000 prompt(s) exceed max_prompt_len=20 with their image tokens" in text
    assert f"row {first['id']!r}: {length} tokens, {from_images} of them from its image(s) of 56x56 pixels" in text
    assert f"Raise max_prompt_len to at least {length}" in text and "lower max_pixels" in text
    print(f"refused in {seconds:.1f} s")


def test_max_pixels_changes_the_pictures_the_check_counts():
    """Pictures scaled down at load time (max_pixels) are the ones counted; Idefics3 without image splitting gives
    any picture the same number of tokens, as its processor says."""
    cfg = vision_cfg(max_prompt_len=20, max_pixels=400, vllm_max_model_len=64)
    text = refusal(cfg)
    first = BasePPOExp(cfg).load_train_rows()[0]
    assert first["images"][0].shape[:2] == (20, 20)
    length, from_images = processor_length(cfg, first)
    assert f"{length} tokens, {from_images} of them from its image(s) of 20x20 pixels" in text


def test_pictures_for_a_text_model_are_refused():
    text = refusal(VisionGRPOCPUConfig(pretrain="tiny", freeze_vision_tower=True))
    assert "freeze_vision_tower: pretrain='tiny' is a text model" in text
    assert "train_data: row 'dots-" in text and "has images, but pretrain='tiny' is a text model" in text


def test_a_prompt_without_a_picture_in_a_vlm_run_is_refused():
    class MixedRows(BasePPOExp):
        def load_train_rows(self):
            return super().load_train_rows() + [{"id": "text-only", "question": "How many?", "answer": "3"}]

    text = refusal(vision_cfg(), MixedRows)
    assert "train_data: row 'text-only' has no image" in text and "every prompt needs at least one" in text


def test_what_the_image_path_does_not_do_yet_is_refused_with_the_reason():
    text = refusal(vision_cfg(reward_pretrain="tiny", reward_num_nodes=1))
    assert "reward_pretrain: a learned reward model is not supported in a vision-language run yet" in text


def test_a_frozen_tower_keeps_the_engines_weights_between_syncs():
    """Syncs after the first send only what trains, so colocated engines sleep at level 1 (weights kept); with LoRA
    the merged sync sends base weights and nothing changes."""
    frozen = vision_cfg(freeze_vision_tower=True)
    assert frozen.sync_trainable_only and frozen.engine_sleep_level == 1
    assert not vision_cfg().sync_trainable_only and vision_cfg().engine_sleep_level == 2
    with_lora = vision_cfg(freeze_vision_tower=True, lora_rank=8)
    assert not with_lora.sync_trainable_only and with_lora.engine_sleep_level == 2

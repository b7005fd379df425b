"""Meta-device models of every family we ship recipes for, with their published shapes (nothing downloaded): what
the weight-sync planner sees of them. Built from transformers' config classes under ``torch.device("meta")``, cast to
bf16 (the dtype the recipes sync in)."""

from __future__ import annotations

import torch

# Qwen/Qwen2.5-7B(-Instruct) and the text model of Qwen2-VL-7B / Qwen2.5-VL-7B (config.json of each)
QWEN7B_TEXT = dict(
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    vocab_size=152064,
    tie_word_embeddings=False,
)
# Qwen/Qwen2.5-0.5B: tied embeddings
QWEN05B_TEXT = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    tie_word_embeddings=True,
)
# Qwen/Qwen2.5-VL-7B-Instruct vision_config
QWEN25_VL_VISION = dict(
    depth=32,
    hidden_size=1280,
    intermediate_size=3420,
    num_heads=16,
    out_hidden_size=3584,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    window_size=112,
    fullatt_block_indexes=[7, 15, 23, 31],
)
# Qwen/Qwen2-VL-7B-Instruct vision_config
QWEN2_VL_VISION = dict(
    depth=32,
    embed_dim=1280,
    hidden_size=3584,
    mlp_ratio=4,
    num_heads=16,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
# HuggingFaceTB/SmolVLM-256M-Instruct (Idefics3): SigLIP-base vision tower, SmolLM2-135M text model
IDEFICS3_VISION = dict(
    hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, patch_size=16, image_size=512
)
IDEFICS3_TEXT = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49280,
    tie_word_embeddings=False,
)


def _meta(cls, config):
    with torch.device("meta"):
        return cls(config).to(torch.bfloat16)


def build(family: str):
    """A meta-device model of ``family``: ``qwen2.5-7b``, ``qwen2.5-0.5b``, ``qwen2-vl-7b``, ``qwen2.5-vl-7b``,
    ``idefics3`` or ``qwen2.5-0.5b-lora`` (a PEFT LoRA on q/k/v/o and the MLP, the recipes' targets)."""
    import transformers as tf

    if family == "qwen2.5-7b":
        return _meta(tf.Qwen2ForCausalLM, tf.Qwen2Config(**QWEN7B_TEXT))
    if family in ("qwen2.5-0.5b", "qwen2.5-0.5b-lora"):
        model = _meta(tf.Qwen2ForCausalLM, tf.Qwen2Config(**QWEN05B_TEXT))
        if family.endswith("lora"):
            from peft import LoraConfig, get_peft_model

            targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
            with torch.device("meta"):
                model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=targets))
        return model
    if family == "qwen2-vl-7b":
        config = tf.Qwen2VLConfig(text_config=QWEN7B_TEXT, vision_config=QWEN2_VL_VISION)
        return _meta(tf.Qwen2VLForConditionalGeneration, config)
    if family == "qwen2.5-vl-7b":
        config = tf.Qwen2_5_VLConfig(text_config=QWEN7B_TEXT, vision_config=QWEN25_VL_VISION)
        return _meta(tf.Qwen2_5_VLForConditionalGeneration, config)
    if family == "idefics3":
        config = tf.Idefics3Config(text_config=dict(model_type="llama", **IDEFICS3_TEXT), vision_config=IDEFICS3_VISION)
        return _meta(tf.Idefics3ForConditionalGeneration, config)
    raise ValueError(family)


# the vLLM architecture each family loads as (its ``FALLBACK_MAPPERS`` entry)
ARCHITECTURE = {
    "qwen2.5-7b": "Qwen2ForCausalLM",
    "qwen2.5-0.5b": "Qwen2ForCausalLM",
    "qwen2.5-0.5b-lora": "Qwen2ForCausalLM",
    "qwen2-vl-7b": "Qwen2VLForConditionalGeneration",
    "qwen2.5-vl-7b": "Qwen2_5_VLForConditionalGeneration",
    "idefics3": "Idefics3ForConditionalGeneration",
}

"""Hugging Face model helpers.

* offline models: a tiny random-init Qwen2 (tests), SmolLM2-135M-Instruct converted from its GGUF (demo);
* batching: padded / packed layouts of (prompt, response) pairs, token-budget micro-batches;
* attention: the backend (``attn_implementation=auto``) resolved in the process that runs the model;
* log-probs and entropy of response tokens; a critic (value head on a causal-LM backbone).
"""

from reasonrl.models.attention import attention_summary, flash_attn_import_error, resolve_attn_implementation
from reasonrl.models.batching import (
    PACKING_MODES,
    PackedBatch,
    PaddedBatch,
    action_mask_from_lens,
    decide_packing,
    pack_batch,
    packing_pays,
    pad_batch,
    padded_grid_tokens,
    plan_micro_batches,
    scatter_to_padded,
    split_by_token_budget,
    split_fixed,
    supports_packing,
)
from reasonrl.models.critic import (
    VALUE_HEAD_FILE,
    CriticModel,
    init_value_head_,
    load_critic,
    response_values,
    save_critic,
)
from reasonrl.models.logprobs import logprobs_from_logits, response_logits, response_logprobs
from reasonrl.models.smollm2 import smollm2_path
from reasonrl.models.tiny import TinyModelSpec, build_tiny_model, tiny_model_path

__all__ = [
    "PACKING_MODES",
    "VALUE_HEAD_FILE",
    "CriticModel",
    "PackedBatch",
    "PaddedBatch",
    "TinyModelSpec",
    "action_mask_from_lens",
    "attention_summary",
    "decide_packing",
    "flash_attn_import_error",
    "build_tiny_model",
    "init_value_head_",
    "load_critic",
    "logprobs_from_logits",
    "pack_batch",
    "pad_batch",
    "resolve_attn_implementation",
    "response_logits",
    "response_logprobs",
    "response_values",
    "save_critic",
    "scatter_to_padded",
    "smollm2_path",
    "plan_micro_batches",
    "split_by_token_budget",
    "split_fixed",
    "packing_pays",
    "padded_grid_tokens",
    "supports_packing",
    "tiny_model_path",
]

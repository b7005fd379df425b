"""Hugging Face model helpers.

* offline models: a tiny random-init Qwen2 (tests), SmolLM2-135M-Instruct converted from its GGUF (demo);
* batching: padded / packed layouts of (prompt, response) pairs, token-budget micro-batches;
* log-probs and entropy of response tokens; a critic (value head on a causal-LM backbone).
"""

from reasonrl.models.batching import (
    PackedBatch,
    PaddedBatch,
    action_mask_from_lens,
    pack_batch,
    packing_pays,
    pad_batch,
    padded_grid_tokens,
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
    "VALUE_HEAD_FILE",
    "CriticModel",
    "PackedBatch",
    "PaddedBatch",
    "TinyModelSpec",
    "action_mask_from_lens",
    "build_tiny_model",
    "init_value_head_",
    "load_critic",
    "logprobs_from_logits",
    "pack_batch",
    "pad_batch",
    "response_logits",
    "response_logprobs",
    "response_values",
    "save_critic",
    "scatter_to_padded",
    "smollm2_path",
    "split_by_token_budget",
    "split_fixed",
    "packing_pays",
    "padded_grid_tokens",
    "supports_packing",
    "tiny_model_path",
]

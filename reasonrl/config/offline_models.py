"""The registry of offline models: ``pretrain=<name>`` for models built, converted or trained on this machine.

The config layer knows each name and its context length (validation needs both, and must stay light); the code that
builds a model lives above it and never imports this module for it: its builders are plain tables, registered here
by the runners with :func:`register_offline_builders`, never on import (dependencies point down; registries are
filled explicitly)::

    reasonrl.models.named.BUILDERS                      tiny, tiny-demo, tiny-code, smollm2, tiny-vlm
    reasonrl.sft.warm_start.WARM_START_BUILDERS         arith-sft, arith-sft-student, arith-sft-teacher, code-sft,
                                                        tools-sft, tools-sft-notool, vision-sft
                                                        (trained from the ones above; arith-sft-teacher from
                                                        arith-sft)
    reasonrl.sft.warm_start.register_offline_models()   registers both tables

Every runner registers them before it resolves a model: the RL run (``reasonrl.run.lifecycle``, before the tokenizer
loads), ``reasonrl.eval``, ``python -m reasonrl.sft`` (all of them) and ``train_sft`` (``reasonrl.models.named``'s).
Code that only builds a config and calls :func:`offline_model_path` itself registers them first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from reasonrl.config.errors import ConfigError

# name -> context length (max_position_embeddings); tests/config/test_offline_models.py checks them against the
# built models.
OFFLINE_MODELS = {
    "tiny": 2048,
    "tiny-demo": 256,
    "tiny-code": 256,
    "smollm2": 8192,
    "tiny-vlm": 256,
    "arith-sft": 256,
    "arith-sft-student": 256,
    "arith-sft-teacher": 256,
    "code-sft": 256,
    "tools-sft": 256,
    "tools-sft-notool": 256,
    "vision-sft": 256,
}

_BUILDERS: dict[str, Callable[[], Path]] = {}


def register_offline_model(name: str, builder: Callable[[], Path]) -> None:
    """Register ``builder`` (no arguments -> the model's local HF folder, built on first call) for ``name``, one of
    :data:`OFFLINE_MODELS`. Registering the same builder again (a re-imported module) is a no-op."""
    if name not in OFFLINE_MODELS:
        raise ValueError(
            f"offline model {name!r} is not declared in reasonrl.config.offline_models.OFFLINE_MODELS (name -> "
            f"context length); declared: {', '.join(OFFLINE_MODELS)}"
        )
    _BUILDERS[name] = builder


def register_offline_builders(builders: Mapping[str, Callable[[], Path]]) -> None:
    """:func:`register_offline_model` of each ``name: builder`` (e.g. of ``reasonrl.models.named.BUILDERS``)."""
    for name, builder in builders.items():
        register_offline_model(name, builder)


def registered_offline_models() -> tuple[str, ...]:
    """Names whose builder is registered in this process (the declared ones whose registration call ran)."""
    return tuple(name for name in OFFLINE_MODELS if name in _BUILDERS)


def offline_model_path(name: str) -> Path:
    """The local HF folder of the offline model ``name``, built / converted / trained first if missing."""
    if name not in OFFLINE_MODELS:
        raise KeyError(f"unknown offline model {name!r}; available: {', '.join(OFFLINE_MODELS)}")
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ConfigError(
            [
                f"offline model {name!r} has no builder in this process: call "
                "reasonrl.sft.warm_start.register_offline_models() first (it registers every offline model; the RL "
                "run, reasonrl.eval and python -m reasonrl.sft call it for you)"
            ],
            title="offline model not registered",
        )
    return Path(builder())

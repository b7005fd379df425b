"""Load prompt/answer rows from json, jsonl, parquet files, Hugging Face dataset folders or built-in names, into
the normalised row format ``{"id", "question", "answer", "source", ...extra fields}``.

    rows = load_rows("data/my_set.jsonl", fields={"question": "problem", "answer": "final_answer"})
    rows = load_rows("gsm8k_train")                       # a built-in dataset (prepared on first use)
    rows = load_rows("orz_math_57k.json", fields="orz")   # ORZ's [{"from": "human", ...}, {...}] dialogues

Field mapping: ``fields`` maps a normalised name (``question``, ``answer``, ``id``) to a path in the raw record:
a key, or a dotted path with list indices (``"0.value"``, ``"1.ground_truth.value"``, ``"meta.answer"``).
Without a mapping the first present key of ``QUESTION_KEYS`` / ``ANSWER_KEYS`` / ``ID_KEYS`` is used.

Gold answers pass through ``answer_from``: ``auto`` (default) reduces a full solution to its final answer (the
last ``\\boxed{}``, or ``#### n``), ``boxed`` / ``gsm8k`` require that form, ``none`` keeps the field as is.

A malformed row (invalid JSON, missing or empty question/answer, wrong type) raises ``DataFormatError`` naming
the file and line (jsonl) or row (json list, parquet, HF folder). With ``on_error="skip"`` such rows are
skipped, counted in ``LoadResult.num_skipped`` and logged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.rewards.extract import gsm8k_answer, last_boxed

QUESTION_KEYS = ("question", "problem", "prompt", "query", "input", "instruction")
ANSWER_KEYS = ("answer", "final_answer", "gold", "ground_truth", "target", "label", "solution")
ID_KEYS = ("id", "unique_id", "idx", "uid")

PRESETS: dict[str, dict[str, str]] = {
    # Open-Reasoner-Zero training files: [{"from": "human", "value": q}, {"from": "assistant", "ground_truth": {...}}]
    "orz": {"question": "0.value", "answer": "1.ground_truth.value"},
    # ORZ eval files: {"prompt": [{"from": "user", "value": q}], "final_answer": a}
    "orz_eval": {"question": "prompt.0.value", "answer": "final_answer"},
    "gsm8k": {"question": "question", "answer": "answer"},
    "math": {"question": "problem", "answer": "solution"},
}

ANSWER_FROM = ("auto", "boxed", "gsm8k", "none")
_DATA_SUFFIXES = (".jsonl", ".json", ".parquet")


class DataFormatError(ValueError):
    """A data file or one of its rows is malformed; the message names the file and line/row."""


@dataclass
class LoadResult:
    """Rows loaded from a source, plus what was skipped (only with ``on_error="skip"``)."""

    rows: list[dict]
    num_skipped: int = 0
    skipped: list[str] = field(default_factory=list)  # the first few error messages

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def get_path(record: Any, path: str) -> Any:
    """Follow a dotted path (``"1.ground_truth.value"``) through dicts and lists; raises KeyError if absent."""
    obj = record
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, (list, tuple)) and part.lstrip("-").isdigit() and -len(obj) <= int(part) < len(obj):
            obj = obj[int(part)]
        else:
            raise KeyError(path)
    return obj


def _answer_value(raw: Any, answer_from: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise TypeError(f"answer must be a string or number, got {type(raw).__name__}")
    text = str(raw).strip()
    if answer_from == "none":
        return text
    boxed = last_boxed(text) if ("\\boxed" in text or "\\fbox" in text) else None
    hashes = gsm8k_answer(text) if "####" in text else None
    if answer_from == "boxed":
        if boxed is None:
            raise ValueError("answer has no \\boxed{} (answer_from='boxed')")
        return boxed
    if answer_from == "gsm8k":
        if hashes is None:
            raise ValueError("answer has no '#### n' (answer_from='gsm8k')")
        return hashes.replace(",", "")
    if boxed is not None:
        return boxed
    if hashes is not None:
        return hashes.replace(",", "")
    return text


def normalize_record(
    record: Any,
    fields: dict[str, str] | None,
    answer_from: str,
    default_id: str,
    source_name: str,
) -> dict:
    """One raw record -> a normalised row; raises ``ValueError``/``KeyError``/``TypeError`` describing the problem."""
    if not isinstance(record, (dict, list)):
        raise TypeError(f"expected a JSON object, got {type(record).__name__}")
    mapping = dict(fields or {})
    for name, keys in (("question", QUESTION_KEYS), ("answer", ANSWER_KEYS)):
        if name not in mapping:
            found = next((k for k in keys if isinstance(record, dict) and k in record), None)
            if found is None:
                raise KeyError(f"no {name} field (looked for {', '.join(keys)}); pass fields={{'{name}': '<key>'}}")
            mapping[name] = found
    row: dict[str, Any] = {}
    for name in ("question", "answer"):
        try:
            value = get_path(record, mapping[name])
        except KeyError:
            raise KeyError(f"missing field {mapping[name]!r} (mapped to {name!r})") from None
        if name == "question":
            if not isinstance(value, str):
                raise TypeError(f"question ({mapping[name]!r}) must be a string, got {type(value).__name__}")
            value = value.strip()
        else:
            value = _answer_value(value, answer_from)
        if not value:
            raise ValueError(f"{name} ({mapping[name]!r}) is empty")
        row[name] = value
    id_key = mapping.get("id") or next((k for k in ID_KEYS if isinstance(record, dict) and k in record), None)
    row["id"] = str(get_path(record, id_key)) if id_key else default_id
    row["source"] = str(record.get("source", source_name)) if isinstance(record, dict) else source_name
    if isinstance(record, dict):
        used = {mapping["question"], mapping["answer"], id_key}
        for k, v in record.items():
            if k not in used and k not in row:
                row[k] = v
    return {"id": row.pop("id"), "question": row.pop("question"), "answer": row.pop("answer"), **row}


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, DataFormatError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})")


def _iter_json(path: Path) -> Iterator[tuple[str, Any]]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a jsonl file named .json
            yield from _iter_jsonl(path)
            return
        raise DataFormatError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if isinstance(data, dict):
        lists = [k for k, v in data.items() if isinstance(v, list)]
        if len(lists) != 1:
            raise DataFormatError(f"{path}: expected a JSON list of records (or an object holding exactly one list)")
        data = data[lists[0]]
    if not isinstance(data, list):
        raise DataFormatError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    for i, record in enumerate(data):
        yield f"{path}: row {i}", record


def _iter_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise DataFormatError(f"{path}: cannot read parquet ({exc})") from exc
    for i, record in enumerate(table.to_pylist()):
        yield f"{path}: row {i}", record


def _iter_hf_folder(path: Path, split: str | None) -> Iterator[tuple[str, Any]]:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DataFormatError(f"{path}: cannot load Hugging Face dataset folder ({exc})") from exc
    if isinstance(ds, datasets.DatasetDict):
        if split is None:
            if len(ds) != 1:
                raise DataFormatError(f"{path}: dataset has splits {sorted(ds)}; pass split=")
            split = next(iter(ds))
        if split not in ds:
            raise DataFormatError(f"{path}: no split {split!r}; available: {sorted(ds)}")
        ds = ds[split]
    for i, record in enumerate(ds):
        yield f"{path} [{split or 'dataset'}]: row {i}", record


def _iter_folder(path: Path, split: str | None) -> Iterator[tuple[str, Any]]:
    if (path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists() or (path / "state.json").exists():
        yield from _iter_hf_folder(path, split)
        return
    files = sorted(p for p in path.rglob("*") if p.suffix in _DATA_SUFFIXES and p.is_file())
    if split is not None:
        files = [p for p in files if split in p.stem or split in p.parent.name]
    if not files:
        raise DataFormatError(
            f"{path}: no {'/'.join(_DATA_SUFFIXES)} files" + (f" for split {split!r}" if split else "")
        )
    for p in files:
        yield from _iter_file(p)


def _iter_file(path: Path) -> Iterator[tuple[str, Any]]:
    if path.suffix == ".jsonl":
        return _iter_jsonl(path)
    if path.suffix == ".json":
        return _iter_json(path)
    if path.suffix == ".parquet":
        return _iter_parquet(path)
    raise DataFormatError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl, .json, .parquet or a folder")


def resolve_source(source: str | os.PathLike) -> Path:
    """A path as given, or the file of a built-in dataset name (``gsm8k_train``, ``arith_add2_train``, ...),
    prepared or generated on demand."""
    from reasonrl.data.arithmetic import GENERATED_DATASETS, generated_dataset_path
    from reasonrl.data.prepare import BUILTIN_DATASETS, builtin_dataset_path

    if isinstance(source, str) and source in BUILTIN_DATASETS:
        return builtin_dataset_path(source)
    if isinstance(source, str) and source in GENERATED_DATASETS:
        return generated_dataset_path(source)
    path = Path(source).expanduser()
    if not path.exists():
        names = sorted(BUILTIN_DATASETS) + sorted(GENERATED_DATASETS)
        raise FileNotFoundError(
            f"data source {str(source)!r} is neither a file/folder nor a built-in dataset ({names})"
        )
    return path


def load_rows(
    source: str | os.PathLike,
    *,
    fields: dict[str, str] | str | None = None,
    answer_from: str = "auto",
    on_error: str = "raise",
    split: str | None = None,
    source_name: str | None = None,
    limit: int | None = None,
    max_logged: int = 5,
) -> LoadResult:
    """Load and normalise rows (see the module docstring).

    Args:
        source: a built-in dataset name, a .jsonl/.json/.parquet file, or a folder (HF ``save_to_disk`` output,
            or a folder of data files).
        fields: ``{"question": path, "answer": path, "id": path}`` or a preset name (``orz``, ``orz_eval``,
            ``gsm8k``, ``math``).
        answer_from: ``auto`` / ``boxed`` / ``gsm8k`` / ``none`` (how the gold answer is taken from its field).
        on_error: ``raise`` (default) or ``skip`` malformed rows (counted in ``num_skipped``).
        split: split of a DatasetDict folder, or a substring filtering the files of a plain folder.
        source_name: value of the ``source`` field (default: the file stem).
        limit: stop after this many good rows.
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if answer_from not in ANSWER_FROM:
        raise ValueError(f"answer_from must be one of {ANSWER_FROM}, got {answer_from!r}")
    if isinstance(fields, str):
        if fields not in PRESETS:
            raise ValueError(f"unknown field preset {fields!r}; available: {sorted(PRESETS)}")
        fields = PRESETS[fields]
    path = resolve_source(source)
    name = source_name or (path.stem if path.is_file() else path.name)
    records = _iter_folder(path, split) if path.is_dir() else _iter_file(path)
    result = LoadResult(rows=[])
    for where, record in records:
        try:
            if isinstance(record, DataFormatError):
                raise record
            row = normalize_record(record, fields, answer_from, f"{name}-{len(result.rows) + result.num_skipped}", name)
        except (DataFormatError, KeyError, ValueError, TypeError) as exc:
            message = str(exc) if isinstance(exc, DataFormatError) else f"{where}: {exc.args[0] if exc.args else exc}"
            if on_error == "raise":
                raise DataFormatError(message) from None
            result.num_skipped += 1
            if len(result.skipped) < max_logged:
                result.skipped.append(message)
                logger.warning(f"skipping malformed row: {message}")
            continue
        result.rows.append(row)
        if limit is not None and len(result.rows) >= limit:
            break
    if result.num_skipped:
        logger.warning(f"{path}: skipped {result.num_skipped} malformed row(s), kept {len(result.rows)}")
    return result

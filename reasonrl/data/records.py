"""The raw records of a data file or folder, each with where it is: ``file:line`` (jsonl), ``file: row i`` (json
list, parquet), ``folder [split]: row i`` (``save_to_disk`` folder), ``owner/name [split]: row i`` (Hub dataset).

    for where, record in iter_file(Path("data/my_set.jsonl")):
        ...  # the parsed JSON value, or a DataFormatError for a row that cannot be read

A row that cannot be read on its own (a jsonl line that is invalid JSON or not valid UTF-8, a parquet row whose
text is not valid UTF-8) is yielded as a :class:`DataFormatError` in place of the record, so the loader can skip
it with ``on_error="skip"``; a file that cannot be read at all (a ``.json`` list that is not valid JSON or UTF-8,
an unreadable parquet file) raises. Text is UTF-8; a byte-order mark at the start of a file is ignored.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from reasonrl.data.sources import DataFormatError, folder_files, is_saved_dataset, open_saved_dataset

_UTF8_FIX = "save the file as UTF-8 (e.g. iconv -f <its encoding> -t UTF-8)"
_ARROW_BATCH = 1024


def _utf8_problem(where: str, exc: UnicodeDecodeError, position: str) -> str:
    return f"{where}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} {position}); {_UTF8_FIX}"


def iter_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """``(path:line, record)`` of each non-blank line; a line that is not UTF-8 or not JSON yields an error."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield where, DataFormatError(_utf8_problem(where, exc, f"at byte {exc.start + 1} of the line"))
                continue
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, DataFormatError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})")


def iter_json(path: Path) -> Iterator[tuple[str, Any]]:
    """``(path: row i, record)`` of a JSON list (or an object holding exactly one list); a file of JSON lines
    named ``.json`` is read as jsonl. The file is parsed whole, so invalid JSON or UTF-8 raises."""
    data = path.read_bytes()
    bad_utf8 = None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bad_utf8 = exc
        text = data.decode("utf-8-sig", errors="replace")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # a jsonl file named .json: each line stands alone (and may be skipped)
            yield from iter_jsonl(path)
            return
        if bad_utf8 is None:
            raise DataFormatError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
    if bad_utf8 is not None:
        line = data.count(b"\n", 0, bad_utf8.start) + 1
        raise DataFormatError(
            _utf8_problem(f"{path}:{line}", bad_utf8, f"at byte {bad_utf8.start + 1} of the file")
            + " (a .json list is read whole: no row can be skipped)"
        )
    if isinstance(parsed, dict):
        lists = [k for k, v in parsed.items() if isinstance(v, list)]
        if len(lists) != 1:
            raise DataFormatError(f"{path}: expected a JSON list of records (or an object holding exactly one list)")
        parsed = parsed[lists[0]]
    if not isinstance(parsed, list):
        raise DataFormatError(f"{path}: expected a JSON list of records, got {type(parsed).__name__}")
    for i, record in enumerate(parsed):
        yield f"{path}: row {i}", record


def _arrow_records(batches: Iterable[Any], label: str) -> Iterator[tuple[str, Any]]:
    """Rows of Arrow record batches / tables as dicts; a row whose text is not valid UTF-8 yields an error."""
    i = 0
    for batch in batches:
        try:
            records = batch.to_pylist()
        except UnicodeDecodeError:
            records = []
            for j in range(batch.num_rows):
                try:
                    records.append(batch.slice(j, 1).to_pylist()[0])
                except UnicodeDecodeError as exc:
                    where = f"{label}: row {i + j}"
                    records.append(DataFormatError(_utf8_problem(where, exc, "in a text column")))
        for record in records:
            yield f"{label}: row {i}", record
            i += 1


def iter_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    """``(path: row i, record)`` of a parquet file."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        raise DataFormatError(f"{path}: cannot read parquet ({exc})") from exc
    yield from _arrow_records(table.to_batches(max_chunksize=_ARROW_BATCH), str(path))


def iter_file(path: Path) -> Iterator[tuple[str, Any]]:
    """The records of one .jsonl / .json / .parquet file."""
    if path.suffix == ".jsonl":
        return iter_jsonl(path)
    if path.suffix == ".json":
        return iter_json(path)
    if path.suffix == ".parquet":
        return iter_parquet(path)
    raise DataFormatError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl, .json, .parquet or a folder")


def iter_folder(path: Path, split: str | None, source: str) -> tuple[Iterator[tuple[str, Any]], str | None]:
    """``(records, split)`` of a folder: a ``save_to_disk`` folder's (chosen) split, or a plain folder's files of
    ``split`` (see :mod:`reasonrl.data.sources`); ``split`` is the one actually loaded, ``None`` for a whole folder."""
    if is_saved_dataset(path):
        ds, split = open_saved_dataset(path, split, source)
        batches = ds.with_format("arrow").iter(batch_size=_ARROW_BATCH)
        return _arrow_records(batches, f"{path} [{split or 'dataset'}]"), split
    files, split = folder_files(path, split, source)
    return itertools.chain.from_iterable(iter_file(p) for p in files), split


def iter_hub(hub: Any, split: str | None, source: str) -> tuple[Iterator[tuple[str, Any]], str | None]:
    """``(records, split)`` of a Hugging Face Hub dataset (a :class:`reasonrl.data.hub.HubId`), loaded with
    ``datasets.load_dataset`` (:func:`reasonrl.data.hub.open_hub_dataset`); ``split`` is the one actually loaded."""
    from reasonrl.data.hub import open_hub_dataset

    ds, split = open_hub_dataset(source, hub, split)
    batches = ds.with_format("arrow").iter(batch_size=_ARROW_BATCH)
    return _arrow_records(batches, f"{hub} [{split or 'dataset'}]"), split

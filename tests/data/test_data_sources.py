"""Data sources with splits: ``path@split``, Hugging Face snapshot folders, save_to_disk DatasetDicts, and the
refusal of a folder that mixes splits (``reasonrl.data.sources`` through ``load_rows``)."""

from __future__ import annotations

import json

import pytest

from reasonrl.data import DataFormatError, load_rows
from reasonrl.data.sources import check_source, parse_source


def _rows(prefix: str, n: int) -> list[dict]:
    return [{"question": f"{prefix} q{i}", "answer": str(i)} for i in range(n)]


def _parquet(path, records):
    import pandas as pd

    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(records).to_parquet(path)


def _jsonl(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def snapshot(tmp_path):
    """The layout of a Hub dataset snapshot: train and test parquet shards side by side, and a README."""
    folder = tmp_path / "snap"
    _parquet(folder / "train-00000-of-00002.parquet", _rows("train", 2))
    _parquet(folder / "train-00001-of-00002.parquet", _rows("train", 1))
    _parquet(folder / "test-00000-of-00001.parquet", _rows("test", 2))
    (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    return folder


def test_snapshot_refused_without_split_and_loads_one_split_with_it(snapshot):
    with pytest.raises(DataFormatError, match=r"holds several splits \(test \(test-00000.*\), train .*snap@train'"):
        load_rows(snapshot)
    train = load_rows(f"{snapshot}@train")
    assert [r["question"] for r in train] == ["train q0", "train q1", "train q0"]
    assert {r["source"] for r in train} == {"snap@train"} and train[0]["id"] == "snap@train-0"
    assert [r["question"] for r in load_rows(snapshot, split="test")] == ["test q0", "test q1"]


def test_data_subfolder_layout(tmp_path):
    folder = tmp_path / "hub"
    _parquet(folder / "data" / "train-00000-of-00001.parquet", _rows("train", 3))
    _parquet(folder / "data" / "validation-00000-of-00001.parquet", _rows("val", 1))
    with pytest.raises(DataFormatError, match=r"holds several splits \(train .*validation"):
        load_rows(folder)
    assert len(load_rows(f"{folder}@train")) == 3
    assert [r["question"] for r in load_rows(f"{folder}@validation")] == ["val q0"]


def test_jsonl_split_files_and_errors_still_name_file_and_line(tmp_path):
    folder = tmp_path / "js"
    _jsonl(folder / "train.jsonl", _rows("train", 2))
    _jsonl(folder / "test.jsonl", _rows("test", 1))
    (folder / "test.jsonl").write_text((folder / "test.jsonl").read_text() + '{"answer": "9"}\n')
    assert [r["answer"] for r in load_rows(f"{folder}@train")] == ["0", "1"]
    with pytest.raises(DataFormatError, match=r"test\.jsonl:2: no question field"):
        load_rows(f"{folder}@test")
    _jsonl(tmp_path / "plain" / "x.jsonl", _rows("x", 1))  # no split-like names: the whole folder is `train`
    _jsonl(tmp_path / "plain" / "y.jsonl", _rows("y", 1))
    assert len(load_rows(tmp_path / "plain")) == len(load_rows(f"{tmp_path / 'plain'}@train")) == 2


def test_folder_skips_hidden_and_metadata_files_as_datasets_does(tmp_path):
    folder = tmp_path / "dl"  # as `huggingface-cli download --local-dir` leaves it
    _jsonl(folder / "x.jsonl", _rows("x", 2))
    _jsonl(folder / ".cache" / "huggingface" / "x.jsonl", _rows("cached", 1))
    (folder / "dataset_infos.json").write_text('{"default": {"features": {}}}')
    assert [r["question"] for r in load_rows(folder)] == ["x q0", "x q1"]


def test_save_to_disk_dataset_dict_with_and_without_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(_rows("train", 2)),
            "test": datasets.Dataset.from_list(_rows("test", 1)),
        }
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataFormatError, match=r"holds several splits \(test, train\).*dd@train'"):
        load_rows(tmp_path / "dd")
    test = load_rows(f"{tmp_path / 'dd'}@test")
    assert [r["question"] for r in test] == ["test q0"] and test[0]["source"] == "dd@test"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows("only", 2))}).save_to_disk(str(tmp_path / "one"))
    assert len(load_rows(tmp_path / "one")) == 2  # a single split needs no name
    datasets.Dataset.from_list(_rows("ds", 1)).save_to_disk(str(tmp_path / "ds"))
    assert len(load_rows(tmp_path / "ds")) == 1
    with pytest.raises(DataFormatError, match=r"single saved Dataset has no splits, so '@train' names nothing"):
        load_rows(f"{tmp_path / 'ds'}@train")


def test_unknown_split_names_the_available_ones(snapshot, tmp_path):
    with pytest.raises(DataFormatError, match=r"no split 'dev'; available: test, train"):
        load_rows(f"{snapshot}@dev")
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows("t", 1))}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataFormatError, match=r"no split 'test'; available: train"):
        load_rows(f"{tmp_path / 'dd'}@test")


def test_split_on_a_file_or_builtin_name_is_refused(tmp_path):
    _jsonl(tmp_path / "f.jsonl", _rows("f", 1))
    with pytest.raises(DataFormatError, match=r"f\.jsonl is a file, and a file has no splits; '@train'"):
        load_rows(f"{tmp_path / 'f.jsonl'}@train")
    with pytest.raises(DataFormatError, match=r"built-in datasets have no splits.*gsm8k_train, gsm8k_test"):
        check_source("gsm8k_train@test")
    with pytest.raises(DataFormatError, match=r"'arith_add2_train@test': built-in datasets have no splits"):
        load_rows("arith_add2_train@test")
    with pytest.raises(DataFormatError, match=r"f\.jsonl is a file"):
        check_source(f"{tmp_path / 'f.jsonl'}@test")


def test_split_given_twice_must_agree(snapshot):
    with pytest.raises(ValueError, match=r"names split 'train' but split='test'"):
        load_rows(f"{snapshot}@train", split="test")
    assert len(load_rows(f"{snapshot}@train", split="train")) == 3


def test_parse_source(tmp_path):
    assert parse_source("data/snap@train") == ("data/snap", "train")
    assert parse_source("gsm8k_test") == ("gsm8k_test", None)
    assert parse_source("user@host/x.jsonl") == ("user@host/x.jsonl", None)  # not a split name: part of the path
    (tmp_path / "v@2").mkdir()
    assert parse_source(tmp_path / "v@2") == (str(tmp_path / "v@2"), None)  # an existing path wins
    assert parse_source(f"{tmp_path / 'v@2'}@test") == (str(tmp_path / "v@2"), "test")
    with pytest.raises(DataFormatError, match="no path before '@'"):
        parse_source("@train")


def test_check_source_reads_no_rows_but_finds_every_structural_problem(snapshot, tmp_path):
    check_source(f"{snapshot}@train")
    check_source("gsm8k_test")
    with pytest.raises(DataFormatError, match="holds several splits"):
        check_source(snapshot)
    with pytest.raises(FileNotFoundError, match=r"'nope' does not exist"):
        check_source("nope@train")

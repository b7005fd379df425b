"""Unique, readable eval set names (``reasonrl.data.eval_names``): stems, parent folders on a clash, splits,
duplicates refused. Pure: the sources need not exist."""

from __future__ import annotations

import pytest

from reasonrl.data import duplicate_sources, eval_set_names


def test_builtin_names_and_unique_stems_are_kept():
    assert eval_set_names(["math500_test", "gsm8k_test", "data/aime24.jsonl", "data/hub"]) == [
        "math500_test",
        "gsm8k_test",
        "aime24",
        "hub",
    ]


def test_same_stem_in_two_folders_takes_the_parent_folders():
    assert eval_set_names(["a/test.jsonl", "b/test.jsonl", "other.jsonl"]) == ["a_test", "b_test", "other"]
    # as many parents as it takes, and only for the names that clash
    assert eval_set_names(["x/a/test.jsonl", "y/a/test.jsonl", "b/test.parquet"]) == [
        "x_a_test",
        "y_a_test",
        "b_test",
    ]


def test_a_path_clashing_with_a_builtin_name_yields_to_it():
    assert eval_set_names(["gsm8k_test", "mine/gsm8k_test.jsonl"]) == ["gsm8k_test", "mine_gsm8k_test"]


def test_split_suffix_and_safe_characters():
    names = eval_set_names(["data/hf snapshot@test", "data/hf snapshot@validation", "data/dd@test"])
    assert names == ["hf_snapshot_test", "hf_snapshot_validation", "dd_test"]
    assert all("/" not in n and " " not in n for n in names)


def test_same_folder_same_stem_falls_back_to_file_type_then_number():
    assert eval_set_names(["d/math.jsonl", "d/math.parquet"]) == ["math_jsonl", "math_parquet"]
    assert eval_set_names(["d/x_test.jsonl", "d/x@test"]) == ["x_test_jsonl", "x_test"]
    assert eval_set_names(["d/x@test", "d/x_test"]) == ["x_test", "x_test_2"]


def test_the_same_source_twice_is_an_error():
    assert duplicate_sources(["a/test.jsonl", "./a/test.jsonl", "gsm8k_test", "gsm8k_test", "d@test"]) == [
        "./a/test.jsonl",
        "gsm8k_test",
    ]
    assert duplicate_sources(["d@train", "d@test", "d"]) == []
    with pytest.raises(ValueError, match=r"eval_data lists the same source twice: './a/test.jsonl'"):
        eval_set_names(["a/test.jsonl", "./a/test.jsonl"])


def test_experiment_keys_eval_sets_by_unique_names(tmp_path, monkeypatch):
    from reasonrl.config import BasePPOExpConfig
    from reasonrl.exp import BasePPOExp

    monkeypatch.chdir(tmp_path)
    for i, path in enumerate(["a/test.jsonl", "b/test.jsonl", "snap/train.jsonl", "snap/test.jsonl"]):
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(f'{{"question": "q{i}", "answer": "{i}"}}\n')
    cfg = BasePPOExpConfig(pretrain="tiny", eval_data=["a/test.jsonl", "b/test.jsonl", "snap@test"])
    sets = BasePPOExp(cfg).load_eval_sets()
    assert {name: [r["answer"] for r in rows] for name, rows in sets.items()} == {
        "a_test": ["0"],
        "b_test": ["1"],
        "snap_test": ["3"],
    }

"""The data-source check of a run (``reasonrl.data.source_checks.data_source_problems``, passed to ``validate()`` by
``reasonrl.run.checks.validate_run``, shared by the RL and SFT configs): ``path@split`` sources, folders that mix
splits, missing paths and duplicate eval entries are reported before anything starts, without reading rows."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.data.source_checks import data_source_problems
from reasonrl.run.checks import validate_run
from reasonrl.sft.config import SFTConfig


def _snapshot(folder):
    """A folder with train and test split files (Hub snapshot naming)."""
    folder.mkdir(parents=True)
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    return folder


def _problems(train, eval_=()):
    return data_source_problems(SimpleNamespace(train_data=list(train), eval_data=list(eval_)))


def test_split_sources_pass_and_every_problem_is_named(tmp_path):
    snap = _snapshot(tmp_path / "snap")
    assert _problems([f"{snap}@train"], [f"{snap}@test", "math500_test"]) == []
    problems = _problems(
        [str(snap), f"{tmp_path / 'gone'}@train", "gsm8k_train@test"],
        [f"{snap}@dev", f"{snap}@test", f"{snap}@test"],
    )
    assert len(problems) == 5, problems
    assert re.search(r"^train_data: .*snap: holds several splits \(test .*, train .*\).*snap@train'", problems[0])
    assert re.search(
        r"^train_data: '.*gone@train': the path '.*gone' before '@train' is neither a built-in", problems[1]
    )
    assert re.search(r"^train_data: .*built-in datasets have no splits.*gsm8k_train, gsm8k_test", problems[2])
    assert re.search(r"^eval_data: .*snap: no split 'dev'; available: test, train", problems[3])
    assert re.search(r"^eval_data: duplicate entry '.*snap@test'", problems[4])


def test_rl_and_sft_configs_refuse_before_starting(tmp_path):
    snap = _snapshot(tmp_path / "snap")
    validate_run(BasePPOExpConfig(pretrain="tiny", device="cpu", generate_max_len=512, train_data=[f"{snap}@train"]))
    with pytest.raises(ConfigError, match=r"train_data: .*holds several splits"):
        validate_run(BasePPOExpConfig(pretrain="tiny", device="cpu", generate_max_len=512, train_data=[str(snap)]))
    with pytest.raises(ConfigError, match=r"eval_data: duplicate entry 'gsm8k_test'"):
        SFTConfig(
            pretrain="tiny",
            train_data=[f"{snap}@train"],
            eval_data=["gsm8k_test", "gsm8k_test"],
            output_dir=str(tmp_path / "o"),
        ).validate()


def test_empty_items_of_list_fields_are_refused_naming_field_and_position():
    """Issue 12: ``train_data=gsm8k_train,`` made ``['gsm8k_train', '']``, and the empty path is the current folder;
    an empty item of any list field is refused, while ``stop=`` (no stop strings) stays valid."""
    base = ["pretrain=tiny", "device=cpu", "generate_max_len=512"]
    cfg = BasePPOExpConfig.from_cli([*base, "train_data=gsm8k_train,", "eval_data=,math500_test", "stop=</answer>,"])
    with pytest.raises(ConfigError) as err:
        validate_run(cfg)
    problems = err.value.problems
    assert len(problems) == 3, problems
    assert problems[0].startswith(
        "train_data: item 2 of 2 is empty (['gsm8k_train', '']) and as a path would load the current folder; a "
        "trailing or doubled comma on the command line makes one: remove it (for no items at all write train_data=)"
    )
    assert problems[1].startswith("eval_data: item 1 of 2 is empty (['', 'math500_test'])")
    assert problems[2].startswith("stop: item 2 of 2 is empty (['</answer>', ''])")
    assert BasePPOExpConfig.from_cli([*base, "stop="]).stop == []
    validate_run(BasePPOExpConfig.from_cli([*base, "stop="]))
    assert _problems(["  "]) == [
        "train_data: item 1 of 1 is empty (['  ']) and as a path would load the current folder; a trailing or "
        "doubled comma on the command line makes one: remove it (for no items at all write train_data=)"
    ]


def test_a_training_source_that_reads_an_eval_set_is_refused(tmp_path):
    """Issue 12: the same built-in name, the same file, or a folder that holds an eval file, in train_data and
    eval_data, is refused before anything starts, unless allow_train_eval_overlap is set."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    (folder / "b.jsonl").write_text(json.dumps({"question": "r", "answer": "2"}) + "\n")
    sources = dict(train_data=["gsm8k_train", str(folder)], eval_data=["gsm8k_train", str(folder / "b.jsonl")])
    problems = data_source_problems(SimpleNamespace(**sources, allow_train_eval_overlap=False))
    assert len(problems) == 2, problems
    assert problems[0].startswith(
        "train_data: 'gsm8k_train' is also an eval_data entry: the run would train on its evaluation set and report "
        "inflated scores; remove it from train_data"
    )
    assert re.match(
        rf"train_data: '{folder}' reads data of eval_data '{folder / 'b.jsonl'}' \(.*b\.jsonl\)", problems[1]
    )
    assert problems[1].endswith("or set allow_train_eval_overlap=true to evaluate on training data on purpose")
    assert _problems(*sources.values())[1].endswith("name the training split, path@train)")  # SFT: no such field
    allowed = SimpleNamespace(train_data=["gsm8k_train"], eval_data=["gsm8k_train"], allow_train_eval_overlap=True)
    assert data_source_problems(allowed) == []
    cfg = BasePPOExpConfig(pretrain="tiny", device="cpu", generate_max_len=512, eval_data=["math_train"])
    with pytest.raises(ConfigError, match=r"train_data: 'math_train' is also an eval_data entry"):
        validate_run(cfg)
    validate_run(cfg.with_overrides({"allow_train_eval_overlap": "true"}))

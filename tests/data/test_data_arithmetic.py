"""The procedural arithmetic task: deterministic rows, a held-out split disjoint by construction, exact-match
reward, and the generated built-in names (``arith_add2_train`` / ``arith_add2_heldout``) in loader and config."""

from __future__ import annotations

import pytest

from reasonrl.data import load_rows
from reasonrl.data.arithmetic import GENERATED_DATASETS, ArithmeticTask, reward, task_files

SMALL = ArithmeticTask(train_size=500, heldout_size=40, seed=3)


def pairs(rows):
    return {tuple(int(x) for x in r["question"].rstrip("=").split("+")) for r in rows}


def test_rows_are_deterministic_correct_and_heldout_disjoint():
    train, heldout = SMALL.rows("train"), SMALL.rows("heldout")
    assert train == SMALL.rows("train") and len(train) == 500 and len(heldout) == 40
    assert len(pairs(heldout)) == 40, "held-out problems are distinct"
    assert not pairs(train) & pairs(heldout), "no held-out operand pair occurs in training"
    for a, b in pairs(train) | pairs(heldout):
        assert 10 <= a <= 99 and 10 <= b <= 99
    for row in train[:50]:
        a, b = map(int, row["question"].rstrip("=").split("+"))
        assert row["answer"] == str(a + b)
    assert ArithmeticTask(seed=4, train_size=500).rows("train") != train
    assert ArithmeticTask(op="mul", digits=1, b_digits=2, train_size=5).rows("train")[0]["question"].count("*") == 1


def test_the_val_split_is_held_out_and_apart_from_the_reported_heldout_set():
    """The warm starts' accuracy band is chosen on ``val`` (issue 45): never-trained pairs of the held-out bucket
    that the reported held-out split does not hold; the train and held-out rows are those of before."""
    val, heldout = SMALL.rows("val"), SMALL.rows("heldout")
    assert val == SMALL.rows("val") and len(val) == len(pairs(val)) == 40
    assert not pairs(val) & pairs(heldout), "the band is never chosen on the reported problems"
    assert not pairs(val) & pairs(SMALL.rows("train")), "nor on trained ones"
    assert all(SMALL.is_heldout(a, b) for a, b in pairs(val))
    with pytest.raises(ValueError, match="val split takes as many"):
        ArithmeticTask(digits=1, heldout_size=5).rows("val")  # 8 held-out pairs: room for 5 held-out, not 5 more
    rows = load_rows("arith_add2_val").rows
    assert len(rows) == 200 and not pairs(rows) & pairs(load_rows("arith_add2_heldout").rows)


def test_bad_task_definitions_are_refused():
    with pytest.raises(ValueError, match="op must be one of"):
        ArithmeticTask(op="pow")
    with pytest.raises(ValueError, match="digits"):
        ArithmeticTask(digits=9)
    with pytest.raises(ValueError, match="too large"):
        ArithmeticTask(digits=1, heldout_size=50).rows("heldout")
    with pytest.raises(ValueError, match="split"):
        SMALL.rows("test")


def test_reward_is_exact_match_of_a_finished_response():
    assert reward("132", "132") == 1.0
    assert reward(" 132 \n", "132") == 1.0
    assert reward("132", "132", finish_reason="length") == 0.0, "a truncated response earns nothing"
    assert reward("132", "132", finish_reasons="stop") == 1.0
    for wrong in ("133", "1320", "132.0", "the answer is 132", ""):
        assert reward(wrong, "132") == 0.0, wrong


def test_task_files_are_written_once_and_load_as_builtin_names(tmp_path):
    train_path, heldout_path = task_files(SMALL, cache_dir=tmp_path)
    mtime = heldout_path.stat().st_mtime_ns
    assert task_files(SMALL, cache_dir=tmp_path) == (train_path, heldout_path)
    assert heldout_path.stat().st_mtime_ns == mtime, "an existing task folder is reused, not rewritten"
    assert [r["answer"] for r in load_rows(heldout_path).rows] == [r["answer"] for r in SMALL.rows("heldout")]

    assert {"arith_add2_train", "arith_add2_heldout", "code_train", "code_heldout"} <= set(GENERATED_DATASETS)
    heldout = load_rows("arith_add2_heldout").rows
    assert len(heldout) == 200 and heldout[0]["question"].endswith("=")
    assert not pairs(heldout) & pairs(load_rows("arith_add2_train", limit=2000).rows)


def test_config_accepts_generated_names_and_suggests_close_ones():
    from reasonrl.config import BasePPOExpConfig, ConfigError
    from reasonrl.run.checks import validate_run  # validate() with the data checks, as a run starts

    cfg = BasePPOExpConfig(
        pretrain="tiny", device="cpu", train_data=["arith_add2_train"], eval_data=["arith_add2_heldout"]
    )
    problems = []
    try:
        validate_run(cfg)
    except ConfigError as err:
        problems = err.problems
    assert not [p for p in problems if "train_data" in p or "eval_data" in p]
    with pytest.raises(ConfigError, match=r"did you mean 'arith_add2_train'"):
        validate_run(BasePPOExpConfig(pretrain="tiny", device="cpu", train_data=["arith_add2_trian"]))

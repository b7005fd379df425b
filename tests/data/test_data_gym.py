"""reasoning-gym as a procedural data source: normalised rows and hard-timeout scorers (countdown, basic_arithmetic)."""

from __future__ import annotations

import builtins
import json

import pytest

pytest.importorskip("reasoning_gym")

from reasonrl.data.gym import GymNotInstalled, GymScorer, GymSource, score_gym_item  # noqa: E402


@pytest.fixture(scope="module")
def scorer():
    with GymScorer(num_workers=2, timeout_s=5.0) as s:
        yield s


@pytest.mark.parametrize("name", ["countdown", "basic_arithmetic"])
def test_rows_are_normalised_and_deterministic(name):
    rows = GymSource(name, size=8, seed=3).rows()
    assert len(rows) == 8
    for i, row in enumerate(rows):
        assert list(row)[:4] == ["id", "question", "answer", "source"]
        assert row["id"] == f"gym/{name}/3/{i}" and row["source"] == f"reasoning_gym:{name}"
        assert row["question"] and row["answer"]
        json.dumps(row)  # serialisable
    assert GymSource(name, size=8, seed=3).rows() == rows
    assert GymSource(name, size=8, seed=4).rows() != rows


def test_countdown_scoring(scorer, tmp_path):
    rows = GymSource("countdown", size=4, seed=0).rows()
    sentinel = tmp_path / "pwned"
    responses = [
        f"<think>try</think> <answer>{rows[0]['answer']}</answer>",
        f"so \\boxed{{{rows[1]['answer']}}}",
        "<answer>1+1</answer>",  # wrong numbers
        f"<answer>__import__('os').system('touch {sentinel}')</answer>",  # never reaches eval
    ]
    scores = scorer.score(responses, rows)
    assert scores[0] == 1.0 and scores[1] == 1.0
    assert scores[2] < 0.1 and scores[3] == 0.0
    assert not sentinel.exists()
    assert scorer.score(["<answer>9**9**9**9</answer>"], rows[:1]) == [0.0]


def test_basic_arithmetic_scoring(scorer):
    rows = GymSource("basic_arithmetic", size=3, seed=1).rows()
    right = [f"<answer>{r['answer']}</answer>" for r in rows]
    wrong = ["<answer>not a number</answer>", "no answer at all", f"The answer is {int(rows[2]['answer']) + 1}."]
    assert scorer.score(right, rows) == [1.0, 1.0, 1.0]
    assert scorer.score(wrong, rows) == [0.0, 0.0, 0.0]


def test_score_item_in_process():
    row = GymSource("basic_arithmetic", size=1, seed=0).row(0)
    assert score_gym_item((f"<answer>{row['answer']}</answer>", row["gym"], "auto")) == 1.0


def test_unsafe_tasks_refused_and_errors(scorer):
    with pytest.raises(ValueError, match="eval/parse_expr"):
        GymSource("simple_integration", size=2)
    with pytest.raises(ValueError, match="not a reasoning-gym row"):
        scorer.score(["x"], [{"id": "a", "question": "q", "answer": "1"}])
    with pytest.raises(ValueError, match="responses but"):
        scorer.score(["x", "y"], [{"gym": {}}])


def test_missing_package_message(monkeypatch):
    from reasonrl.data import gym

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "reasoning_gym":
            raise ImportError("No module named 'reasoning_gym'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(GymNotInstalled, match="pip install reasoning-gym==0.1.25"):
        gym._reasoning_gym()

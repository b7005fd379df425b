"""Scorers: the ORZ math rule through the verifier pool, and user reward functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.dataplane.completion import Completion
from reasonrl.rewards.routing import build_scorer
from reasonrl.rewards.scorers import MathScorer, UserFnScorer

FIXTURE = Path(__file__).parents[1] / "fixtures" / "toy_rewards.py"


def completion(text: str, finish: str = "stop") -> Completion:
    return Completion(0, 0, [1], [5] * max(len(text), 1), text, finish)


def test_math_scorer_applies_orz_rule():
    scorer = MathScorer(TinyPPOCPUConfig(verify_workers=1))
    try:
        results = scorer(
            [completion("so \\boxed{12}"), completion("so \\boxed{12}", "length"), completion("\\boxed{13}")],
            [{"answer": "12"}] * 3,
        )
    finally:
        scorer.close()
    assert [r.reward for r in results] == [1.0, 0.0, 0.0]
    assert [r.correct for r in results] == [True, True, False]  # truncated but right: correct, not rewarded
    assert results[1].truncated and results[2].reason == "wrong"


def test_user_fn_scorer_and_failures_score_zero(tmp_path):
    scorer = UserFnScorer(f"{FIXTURE}:digit_fraction", correct_threshold=0.5)
    results = scorer([completion("12ab"), completion("")], [{"answer": "1"}, {"answer": "2"}])
    assert [r.reward for r in results] == [0.5, 0.0] and [r.correct for r in results] == [True, False]
    bad = tmp_path / "bad.py"
    bad.write_text("def fn(response, gold, **meta):\n    raise RuntimeError('boom')\n")
    assert [r.reward for r in UserFnScorer(f"{bad}:fn")([completion("x")], [{"answer": "1"}])] == [0.0]


def test_build_scorer_picks_by_config():
    scorer = build_scorer(TinyPPOCPUConfig(reward_fn=f"{FIXTURE}:digit_fraction"))
    assert list(scorer.scorers) == ["user"] and isinstance(scorer.scorers["user"], UserFnScorer)
    with pytest.raises(Exception, match="nope"):
        build_scorer(TinyPPOCPUConfig(reward_fn=f"{FIXTURE}:nope"))

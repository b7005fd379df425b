"""ORZ reward rule, format reward, DAPO overlong penalty, metrics and repetition statistics."""

from __future__ import annotations

import pytest

from reasonrl.rewards import (
    RewardConfig,
    RewardResult,
    final_reward,
    format_ok,
    overlong_penalty,
    repetition_stats,
    response_repetition,
    reward_metrics,
    score_responses,
)

GOOD = "Let me add. 2+3=5.</think> <answer>\\boxed{5}</answer>"
WRONG = "Let me add. 2+3=6.</think> <answer>\\boxed{6}</answer>"
NO_ANSWER = "Let me add. 2+3 is"


def test_orz_rule_needs_stop_and_correct(verifier):
    results = score_responses(
        [GOOD, GOOD, WRONG, NO_ANSWER], ["5", "5", "5", "5"], ["stop", "length", "stop", "length"], verifier=verifier
    )
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 0.0]
    assert [r.correct for r in results] == [True, True, False, False]
    assert [r.reason for r in results] == ["correct", "correct", "wrong", "no_answer"]
    assert [r.truncated for r in results] == [False, True, False, True]
    assert results[0].extracted == "5"


def test_require_stop_off_and_custom_values(verifier):
    cfg = RewardConfig(require_stop=False, correct_reward=2.0, wrong_reward=-1.0)
    results = score_responses([GOOD, WRONG], ["5", "5"], ["length", "stop"], verifier=verifier, config=cfg)
    assert [r.reward for r in results] == [2.0, -1.0]


def test_orz_extract_mode_is_strict(verifier):
    untagged = "so it is \\boxed{5}"
    cfg = RewardConfig(extract_mode="orz")
    results = score_responses([untagged, GOOD], ["5", "5"], ["stop", "stop"], verifier=verifier, config=cfg)
    assert [r.reward for r in results] == [0.0, 1.0]
    default = score_responses([untagged], ["5"], ["stop"], verifier=verifier)
    assert default[0].reward == 1.0


@pytest.mark.parametrize(
    "response, ok",
    [
        (GOOD, True),
        ("<think>x</think><answer>\\boxed{1}</answer>\n", True),
        ("x</think> <answer>1</answer>", False),  # no box
        ("x <answer>\\boxed{1}</answer>", False),  # no </think>
        ("x</think> <answer>\\boxed{1}</answer> trailing", False),
        ("x</think> <answer>\\boxed{1}</answer><answer>\\boxed{2}</answer>", False),
        ("x</think> y </think> <answer>\\boxed{1}</answer>", False),
        ("x</think> <answer>\\boxed{1}", False),
    ],
)
def test_format_ok(response, ok):
    assert format_ok(response) is ok


def test_format_reward_is_additive(verifier):
    cfg = RewardConfig(format_reward=0.1)
    results = score_responses([GOOD, WRONG, "\\boxed{5}"], ["5", "5", "5"], ["stop"] * 3, verifier=verifier, config=cfg)
    assert [r.reward for r in results] == pytest.approx([1.1, 0.1, 1.0])
    assert [r.format_ok for r in results] == [True, True, False]


@pytest.mark.parametrize(
    "length, expected",
    [(0, 0.0), (80, 0.0), (90, -0.5), (100, -1.0), (150, -1.0)],
)
def test_overlong_penalty_formula(length, expected):
    assert overlong_penalty(length, max_length=100, buffer_len=20, factor=1.0) == pytest.approx(expected)


def test_overlong_penalty_matches_algos_dapo():
    dapo = pytest.importorskip("reasonrl.algos.dapo")
    lengths = list(range(0, 130, 7))
    ours = [overlong_penalty(n, 100, 30, 0.5) for n in lengths]
    theirs = dapo.soft_overlong_punishment(lengths, 100, 30, 0.5).tolist()
    assert ours == pytest.approx(theirs)


def test_overlong_in_score_responses(verifier):
    cfg = RewardConfig(overlong_buffer_len=20, max_response_length=100)
    results = score_responses(
        [GOOD, GOOD], ["5", "5"], ["stop", "stop"], verifier=verifier, response_lengths=[50, 90], config=cfg
    )
    assert [r.reward for r in results] == pytest.approx([1.0, 0.5])
    assert results[1].overlong_penalty == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="response_lengths"):
        score_responses([GOOD], ["5"], ["stop"], verifier=verifier, config=cfg)
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        overlong_penalty(5, 10, 0)


def test_length_mismatch_raises(verifier):
    with pytest.raises(ValueError, match="lengths differ"):
        score_responses([GOOD], ["5", "6"], ["stop"], verifier=verifier)


def test_reward_metrics(verifier):
    responses = [GOOD, GOOD, WRONG, NO_ANSWER]
    results = score_responses(responses, ["5"] * 4, ["stop", "length", "stop", "length"], verifier=verifier)
    m = reward_metrics(results, responses + [])
    assert m["reward/mean"] == 0.25
    assert m["reward/accuracy"] == 0.5
    assert m["reward/truncated_frac"] == 0.5
    assert m["reward/reason_no_answer_frac"] == 0.25
    assert m["reward/reason_timeout_frac"] == 0.0
    assert "reward/reflection_words_mean" in m


def test_repetition_stats():
    looping = "I will check this again. " * 40
    normal = " ".join(f"word{i}" for i in range(300))
    r = response_repetition(looping)
    assert r.looping and r.max_ngram_count >= 30 and r.rep_ratio > 0.9
    s = response_repetition(normal)
    assert not s.looping and s.max_ngram_count == 1 and s.rep_ratio == 0.0
    assert response_repetition("short text").max_ngram_count == 0
    stats = repetition_stats([looping, normal, ""])
    assert stats["repetition/looping_frac"] == pytest.approx(1 / 3)
    assert stats["repetition/max_ngram_count_max"] >= 30
    assert repetition_stats([])["repetition/looping_frac"] == 0.0


def test_final_reward_is_scored_plus_environment_plus_reward_model_and_each_call_starts_from_the_scorer():
    r = RewardResult(reward=0.5, correct=False, reason="wrong", format_bonus=0.25, overlong_penalty=-0.125)
    assert final_reward(r, env_reward=0.3) == 0.5 + 0.3 and r.scored_reward == 0.5 and r.env_reward == 0.3
    assert final_reward(r, model_score=-0.7) == r.reward == (0.5 + 0.3) + -0.7 and r.model_score == -0.7
    assert final_reward(r) == r.reward  # again: the same parts, the same number (not added twice)
    plain = RewardResult(reward=1, correct=True, reason="user_fn")  # a reward function's int
    assert final_reward(plain, env_reward=0.0) == 1.0 and isinstance(plain.reward, float)

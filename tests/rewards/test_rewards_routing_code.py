"""Rows with ``data_source: code`` are scored by running the completion's program against the row's tests in the
real sandbox (``CodeScorer`` behind the trainer's ``RoutingScorer``), beside math rows in the same batch; their
verdicts reach the ``reward/code_*`` metrics; malformed tests are refused naming the row, before any scoring."""

from __future__ import annotations

import json

import pytest

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.dataplane.completion import Completion
from reasonrl.loop.eval_metrics import vote_keys
from reasonrl.loop.rollout import rollout_metrics
from reasonrl.rewards.routing import RoutingScorer, routing_problems

ADD = {"fn_name": "add", "inputs": [[1, 2], [5, 7], [-3, 3]], "outputs": [3, 12, 0]}
ECHO = {"inputs": ["4\n", "10\n"], "outputs": ["8\n", "20\n"]}


def completion(text: str, finish: str = "stop") -> Completion:
    return Completion(0, 0, [1], [5] * 3, text, finish)


def code_cfg(**kw) -> TinyPPOCPUConfig:
    return TinyPPOCPUConfig(
        **{"reward_fn": None, "verify_workers": 1, "code_workers": 2, "code_test_timeout_s": 2.0} | kw
    )


def fenced(body: str) -> str:
    return f"Here is my solution.\n```python\n{body}\n```\nDone."


@pytest.fixture(scope="module")
def scorer():
    s = RoutingScorer(code_cfg())
    s.wait_ready()
    yield s
    s.close()


def test_code_rows_run_their_tests_beside_math_rows(scorer):
    rows = [
        {"id": "c1", "question": "add", "data_source": "code", "tests": ADD},
        {"id": "m", "question": "q", "answer": "12"},
        {"id": "c2", "question": "double", "data_source": "code", "tests": json.dumps(ECHO)},  # JSON text works too
        {"id": "c3", "question": "add", "data_source": "code", "tests": ADD},
        {"id": "c4", "question": "add", "data_source": "code", "tests": ADD},
        {"id": "c5", "question": "add", "data_source": "code", "tests": ADD},
    ]
    texts = [
        fenced("def add(a, b):\n    return a + b"),
        "so \\boxed{12}",
        "print(2 * int(input()))",  # no fence: the whole completion is the program
        fenced("def add(a, b):\n    return abs(a) + b"),  # wrong on 1 of 3 tests
        fenced("def add(a, b):\n    while True:\n        pass"),
        fenced("def add(a, b):\n    raise RuntimeError('no')"),
    ]
    results = scorer([completion(t) for t in texts], rows)
    assert [r.correct for r in results] == [True, True, True, False, False, False]
    reasons = [r.reason for r in results]
    # a busy loop meets the wall-clock deadline or the CPU limit (both 2 s) first, as the load decides
    assert reasons[:4] + reasons[5:] == ["correct", "correct", "correct", "wrong", "error"] and reasons[4] in (
        "timeout",
        "killed",
    )
    assert [r.reward for r in results] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert results[0].extracted == "def add(a, b):\n    return a + b\n"  # the program that ran
    assert results[1].code_verdict is None and results[3].code_verdict.passed == 2
    m = rollout_metrics([completion(t) for t in texts], results, generate_max_len=16)
    assert (m["reward/code_passed"], m["reward/code_wrong"], m["reward/code_error"]) == (2.0, 1.0, 1.0)
    assert m["reward/code_timeout"] + m["reward/code_killed"] == 1.0
    assert m["reward/code_test_pass_frac"] == pytest.approx((1 + 1 + 2 / 3) / 5)
    assert vote_keys([r for r in results if r.code_verdict is not None]) is None  # no maj@k over programs


def test_fraction_reward_and_the_stop_rule():
    s = RoutingScorer(code_cfg(code_reward="fraction"))
    try:
        row = {"id": "c", "question": "add", "data_source": "code", "tests": ADD}
        wrong, right = fenced("def add(a, b):\n    return abs(a) + b"), fenced("def add(a, b):\n    return a + b")
        a, b, c = s([completion(wrong), completion(right), completion(right, "length")], [row] * 3)
        assert a.reward == pytest.approx(2 / 3) and not a.correct  # two tests of three pass
        assert b.reward == 1.0 and b.correct
        assert c.reward == 0.0 and c.correct and c.truncated  # ORZ rule: nothing for a response cut at the limit
    finally:
        s.close()


def test_math_only_runs_never_build_the_code_scorer(scorer):
    s = RoutingScorer(code_cfg())
    try:
        s([completion("\\boxed{3}")], [{"id": "m", "question": "q", "answer": "3"}])
        assert set(s.scorers) == {"math"}
    finally:
        s.close()


@pytest.mark.parametrize(
    "tests, message",
    [
        (None, "needs a 'tests' field"),
        ({"inputs": ["1"], "outputs": []}, "same length"),
        ("{not json", "malformed"),
        ({"entry_point": "f"}, "non-empty 'inputs'"),
    ],
)
def test_malformed_code_rows_are_refused_naming_the_row(tests, message):
    row = {"id": "bad-7", "question": "q", "data_source": "code"} | ({} if tests is None else {"tests": tests})
    problems = routing_problems(code_cfg(), {"train_data": [{"id": "ok", "question": "q", "answer": "1"}, row]})
    assert len(problems) == 1
    assert problems[0].startswith("train_data row 1 (id 'bad-7')") and message in problems[0]


def test_code_config_fields_are_validated():
    from reasonrl.config import ConfigError

    with pytest.raises(ConfigError) as err:
        code_cfg(code_reward="most", code_test_timeout_s=0, code_batch_timeout_s=-1, code_isolate="chroot").validate()
    text = str(err.value)
    for field in ("code_reward", "code_test_timeout_s", "code_batch_timeout_s", "code_isolate"):
        assert field in text
    cfg = code_cfg(code_reward="fraction", code_batch_timeout_s=None).code_reward_config()
    assert (cfg.reward, cfg.test_timeout_s, cfg.batch_timeout_s, cfg.workers) == ("fraction", 2.0, None, 2)

"""Per-row routing of rewards by ``data_source`` (math / exact_match / gym / user), with a real verifier pool and
real reasoning-gym worker processes; unknown values refused naming the row; math-only runs never touch gym."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.data.gym_source import gym_sources
from reasonrl.dataplane.completion import Completion
from reasonrl.rewards.routing import RoutingScorer, build_scorer, routing_problems
from reasonrl.rewards.scorers import ExactMatchScorer, exact_key

FIXTURE = Path(__file__).parents[1] / "fixtures" / "toy_rewards.py"
GYM_TRAIN = "gym:basic_arithmetic:size=4:seed=3"


def completion(text: str, finish: str = "stop") -> Completion:
    return Completion(0, 0, [1], [5] * 3, text, finish)


def math_cfg(**kw) -> TinyPPOCPUConfig:
    return TinyPPOCPUConfig(reward_fn=None, verify_workers=1, **kw)


@pytest.fixture(scope="module")
def gym_rows():
    pytest.importorskip("reasoning_gym")
    from reasonrl.data.gym_source import gym_source_rows

    return gym_source_rows(GYM_TRAIN)


@pytest.fixture(scope="module")
def scorer(gym_rows):
    cfg = math_cfg(train_data=[GYM_TRAIN], eval_data=[])
    s = build_scorer(cfg, gym_sources(cfg))
    s.wait_ready()
    yield s
    s.close()


def test_mixed_batch_is_scored_in_order(scorer, gym_rows):
    g0, g1 = gym_rows[0], gym_rows[1]
    saved = {k: g1[k] for k in ("id", "question", "answer", "gym")}  # a gym row saved to a file, with its reference
    rows = [
        {"id": "m", "question": "q", "answer": "12"},  # no data_source: the config default, math
        dict(g0),  # a gym: source row (its gym reference routes it)
        {"id": "e", "question": "q", "answer": "\\text{Yes}", "data_source": "exact_match"},
        {**saved, "data_source": "gym:basic_arithmetic"},  # the entry is regenerated from its reference
        {"id": "m2", "question": "q", "answer": "1/2", "data_source": "math"},
        {"id": "e2", "question": "q", "answer": "1/2", "data_source": "exact_match"},
        dict(g0),
    ]
    texts = [
        "so \\boxed{12}",
        f"<answer>{g0['answer']}</answer>",
        "The answer is $yes$",
        f"<answer>{int(g1['answer']) + 1}</answer>",
        "\\boxed{0.5}",
        "\\boxed{0.5}",
        f"<answer>{g0['answer']}</answer>",
    ]
    finishes = ["stop"] * 6 + ["length"]
    results = scorer([completion(t, f) for t, f in zip(texts, finishes, strict=True)], rows)
    assert [r.correct for r in results] == [True, True, True, False, True, False, True]
    assert [r.reward for r in results] == [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]  # the last is truncated
    assert [r.reason for r in results] == ["correct", "correct", "correct", "wrong", "correct", "wrong", "correct"]
    assert results[1].extracted == g0["answer"] and results[6].truncated
    assert set(scorer.scorers) == {"math", "gym", "exact_match"}


def test_gym_no_answer_and_unsafe_answer(scorer, gym_rows):
    results = scorer([completion("no answer here"), completion("<answer>__import__('os')</answer>")], gym_rows[:2])
    assert [(r.reward, r.reason) for r in results] == [(0.0, "no_answer"), (0.0, "wrong")]


def test_user_default_and_exact_match_route():
    s = build_scorer(TinyPPOCPUConfig(reward_fn=f"{FIXTURE}:digit_fraction", verify_workers=1))
    try:
        rows = [{"answer": "1"}, {"answer": "ab", "data_source": "exact_match"}, {"answer": "1", "data_source": "user"}]
        results = s([completion("12ab"), completion("\\boxed{AB}"), completion("1")], rows)
    finally:
        s.close()
    assert [r.reason for r in results] == ["user_fn", "correct", "user_fn"]
    assert [r.reward for r in results] == [0.5, 1.0, 1.0]
    assert set(s.scorers) == {"user", "exact_match"}  # no math verifier pool was started


def test_exact_match_normalisation_and_shaping():
    assert exact_key("$\\text{ New  York }$") == exact_key("new york") and exact_key("0.5") != exact_key("1/2")
    cfg = math_cfg(format_reward=0.5)
    results = ExactMatchScorer(cfg.reward_config())(
        [completion("<think>x</think> <answer>\\boxed{7}</answer>"), completion("\\boxed{7}", "length")],
        [{"answer": "7"}] * 2,
    )
    assert [(r.reward, r.correct, r.format_ok) for r in results] == [(1.5, True, True), (0.0, True, False)]


REF = {"name": "countdown", "seed": 0, "size": 4, "config": "{}", "index": 1}  # a well-formed reference


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"id": "x", "answer": "1", "data_source": "openai/gsm8k"},
            "unknown data_source 'openai/gsm8k'; allowed: math",
        ),
        ({"id": "x", "answer": "1", "data_source": 3}, "data_source 3 is a int"),
        ({"id": "x", "answer": "1", "data_source": "user"}, "set reward_fn"),
        ({"id": "x", "answer": "1", "data_source": "gym"}, "needs the row's 'gym' reference"),
        (
            {"id": "x", "answer": "1", "data_source": "gym:bitwise_arithmetic", "metadata": {"problem": "0"}},
            "never passed to reasoning-gym",  # its scorer evals entry fields: a row's own text never gets there
        ),
        ({"id": "x", "answer": "1", "gym": {**REF, "name": "simple_integration"}}, "allow_unsafe_scorer=true"),
        ({"id": "x", "answer": "1", "gym": "countdown"}, "not a reasoning-gym reference"),
        ({"id": "x", "answer": "1", "gym": {**REF, "entry": {"answer": "1"}}}, "not a reasoning-gym reference"),
        ({"id": "x", "answer": "1", "gym": {**REF, "index": 9}}, "not a reasoning-gym reference"),  # index >= size
        ({"id": "x", "answer": "1", "data_source": "gym:chain_sum", "gym": REF}, "is task 'countdown'"),
    ],
)
def test_bad_data_source_refused_naming_the_row(row, message):
    rows = {"train_data": [{"id": "ok", "answer": "1"}, row]}
    problems = routing_problems(math_cfg(), rows)
    assert len(problems) == 1 and problems[0].startswith("train_data row 1 (id 'x'): ")
    assert message in problems[0]


def test_unknown_gym_task_and_problem_cap(gym_rows):
    rows = [{"id": str(i), "answer": "1", "data_source": "nope"} for i in range(5)]
    problems = routing_problems(math_cfg(), {"eval_data gsm8k": rows, "train_data": gym_rows})
    assert problems[-1] == "eval_data gsm8k: 2 more row(s) with a bad data_source" and len(problems) == 4
    unknown = {"id": "a", "answer": "1", "data_source": "gym:chainsum", "gym": {**REF, "name": "chainsum"}}
    problems = routing_problems(math_cfg(), {"train_data": [unknown]})
    assert problems == [
        "train_data row 0 (id 'a'): reasoning-gym has no task 'chainsum' "
        "(python -m reasonrl.data.gym_source lists them)"
    ]
    unsafe_ok = math_cfg(train_data=["gym:simple_integration:allow_unsafe_scorer=true:size=2"], eval_data=[])
    assert (
        routing_problems(
            unsafe_ok,
            {"t": [{"id": "a", "answer": "1", "gym": {**REF, "name": "simple_integration"}}]},
            gym=gym_sources(unsafe_ok),
        )
        == []
    )


def test_scorer_refuses_unroutable_batch(scorer):
    with pytest.raises(ValueError, match="row 0 \\(id 'x'\\): unknown data_source 'nope'"):
        scorer([completion("x")], [{"id": "x", "answer": "1", "data_source": "nope"}])


def test_math_only_run_never_imports_reasoning_gym(tmp_path):
    """A run without gym rows or sources: the routing scorer starts the math verifier only, reasoning-gym is never
    imported (in this process or a worker), and the batch goes to the math scorer whole."""
    script = tmp_path / "math_only.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from playground.tiny_ppo_cpu import TinyPPOCPUConfig
            from reasonrl.rewards.routing import build_scorer, routing_problems
            from reasonrl.dataplane.completion import Completion


            def gym_imported(_):
                return "reasoning_gym" in sys.modules


            if __name__ == "__main__":
                cfg = TinyPPOCPUConfig(reward_fn=None, verify_workers=1)
                rows = [{"id": "a", "answer": "12"}, {"id": "b", "answer": "3", "data_source": "math"}]
                assert routing_problems(cfg, {"train_data": rows}) == []
                scorer = build_scorer(cfg)
                try:
                    scorer.wait_ready()
                    out = scorer([Completion(0, 0, [1], [5], "\\\\boxed{12}", "stop")] * 2, rows)
                    in_worker = [o.value for o in scorer.scorers["math"].verifier.map(gym_imported, [0])]
                finally:
                    scorer.close()
                print([r.reward for r in out], sorted(scorer.scorers), "reasoning_gym" in sys.modules, in_worker)
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[2]
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[1.0, 0.0] ['math'] False [False]"


def test_routing_scorer_is_the_default(scorer):
    assert isinstance(scorer, RoutingScorer) and scorer.default == "math"

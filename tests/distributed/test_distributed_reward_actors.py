"""Reward work on the cluster (``reward_num_cpus``): real Ray actors started by the run's own
``reasonrl.run.launch.start_reward_actors`` on the session's Ray instance, scoring the math and code routes of a real
routing scorer. Each test computes the expected results with the driver's scorer (process pools, the same config
with ``reward_num_cpus=0``) and compares field by field: verdicts, rewards, reasons, deadlines."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time

import pytest

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.config import ConfigError
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.reward_actors import RewardActorError, RewardActors
from reasonrl.rewards.routing import build_scorer
from reasonrl.run.launch import start_reward_actors

ADD = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
SPIN = "while True:\n    pass\n"
SLOW_ADD = "import time\ntime.sleep(0.5)\na, b = map(int, input().split())\nprint(a + b)\n"


# Deadlines that a correct program meets on a loaded machine: the tests compare the actors' verdicts with the driver's,
# so a fresh interpreter that starts slowly on one side must not turn "wrong" into "timeout" (seen with 1 s at the end
# of a suite run, both test workers busy). The spinning program still times out, after TEST_TIMEOUT_S.
TEST_TIMEOUT_S, MAX_TIMEOUT_S = 5.0, 15.0


def cfg(**kw) -> TinyPPOCPUConfig:
    base = dict(
        reward_fn=None,
        verify_workers=1,
        code_workers=2,
        code_test_timeout_s=TEST_TIMEOUT_S,
        code_max_timeout_s=MAX_TIMEOUT_S,
    )
    return TinyPPOCPUConfig(**{**base, **kw})


def completion(text: str, finish: str = "stop", tokens: int = 3) -> Completion:
    return Completion(0, 0, [1, 2], [5] * tokens, text, finish, logprobs=[-0.5] * tokens)


def fenced(program: str) -> str:
    return f"Here it is:\n```python\n{program}```\n"


def math_rows_and_completions() -> tuple[list[dict], list[Completion]]:
    cases = [
        ("12", "so \\boxed{12}", "stop"),  # correct
        ("1/2", "the answer is \\boxed{0.5}", "stop"),  # correct, another form
        ("7", "\\boxed{8}", "stop"),  # wrong
        ("3", "no idea", "stop"),  # no answer
        ("12", "\\boxed{12}", "length"),  # correct but truncated: reward withheld
    ]
    rows = [{"id": f"m{i}", "question": "q", "answer": gold} for i, (gold, _, _) in enumerate(cases)]
    return rows, [completion(text, finish) for _, text, finish in cases]


def code_rows_and_completions() -> tuple[list[dict], list[Completion]]:
    programs = [
        "a, b = map(int, input().split())\nprint(a + b)\n",  # passed
        "a, b = map(int, input().split())\nprint(a * b)\n",  # wrong
        "raise SystemExit(3)\n",  # error
        "print(sum(map(int, input().split())))\n",  # passed
    ]
    rows = [{"id": f"c{i}", "question": "q", "answer": "", "data_source": "code", "tests": ADD} for i in programs]
    return rows, [completion(fenced(p)) for p in programs]


def same(got, expected) -> None:
    """Results equal field by field, the code verdict's too (elapsed times aside)."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g.reward, g.correct, g.reason, g.extracted, g.truncated) == (
            e.reward,
            e.correct,
            e.reason,
            e.extracted,
            e.truncated,
        )
        if e.code_verdict is None:
            assert g.code_verdict is None
        else:
            gv, ev = g.code_verdict, e.code_verdict
            assert (gv.status, gv.passed, gv.total) == (ev.status, ev.passed, ev.total)


@pytest.fixture(scope="module")
def driver():
    scorer = build_scorer(cfg())
    scorer.wait_ready()
    yield scorer
    scorer.close()


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    """A routing scorer whose math and code routes run on two reward actors, attached as a run attaches them."""
    config = cfg(reward_num_cpus=2)
    scorer = build_scorer(config)
    assert not scorer.scorers  # nothing started on the driver: the default route (math) waits for its actors
    with contextlib.ExitStack() as stack:
        actors = start_reward_actors(config, stack, scorer)
        actors.wait_ready()
        yield scorer, actors
    assert not {"math", "code"} & set(scorer.scorers)  # the attempt's stack detached them before closing the actors


def test_math_and_code_rows_score_as_on_the_driver(driver, cluster):
    scorer, actors = cluster
    math_rows, math_completions = math_rows_and_completions()
    code_rows, code_completions = code_rows_and_completions()
    exact = {"id": "e", "question": "q", "answer": "yes", "data_source": "exact_match"}
    rows = [math_rows[0], code_rows[0], exact, *math_rows[1:], *code_rows[1:]]
    completions = [math_completions[0], code_completions[0], completion("\\boxed{Yes}")]
    completions += math_completions[1:] + code_completions[1:]
    got = scorer(completions, rows)
    same(got, driver(completions, rows))
    assert [r.reason for r in got[:3]] == ["correct", "correct", "correct"]  # math, code, exact_match (driver)
    assert {r.code_verdict.status for r in got if r.code_verdict} == {"passed", "wrong", "error"}
    assert "exact_match" not in actors.builds  # string work stays on the driver
    assert len({place["pid"] for place in actors.places}) == 2


def test_a_program_past_its_deadline_times_out_on_an_actor(driver, cluster):
    scorer, _ = cluster
    one_test = {"inputs": ADD["inputs"][:1], "outputs": ADD["outputs"][:1]}  # the spin costs one TEST_TIMEOUT_S
    rows = [{"id": "s", "question": "q", "answer": "", "data_source": "code", "tests": one_test}] * 2
    spin, ok = completion(fenced(SPIN)), completion(fenced("print(sum(map(int, input().split())))\n"))
    start = time.perf_counter()
    got = scorer([spin, ok], rows)
    took = time.perf_counter() - start
    same(got, driver([spin, ok], rows))
    verdict = got[0].code_verdict
    assert verdict.status == "timeout" and got[0].reward == cfg().wrong_reward
    # the per-test limit, within the program cap plus slack
    assert TEST_TIMEOUT_S <= verdict.elapsed_s and took < MAX_TIMEOUT_S + 5.0


def test_an_actor_killed_mid_batch_is_replaced_and_its_chunk_scored_again(driver, cluster):
    import signal

    scorer, actors = cluster
    rows = [{"id": f"k{i}", "question": "q", "answer": "", "data_source": "code", "tests": ADD} for i in range(4)]
    completions = [completion(fenced(SLOW_ADD))] * 2 + [completion(fenced("print(0)\n"))] * 2
    expected = driver(completions, rows)
    victim = actors.places[0]["pid"]
    restarts = actors.restarts
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(results=scorer(completions, rows)))
    worker.start()
    time.sleep(0.4)  # actor 0 is running its chunk's slow program (two tests of 0.5 s)
    os.kill(victim, signal.SIGKILL)
    worker.join(timeout=60)
    assert not worker.is_alive()
    same(out["results"], expected)
    assert actors.restarts == restarts + 1
    assert actors.places[0]["pid"] != victim


def test_an_actor_that_dies_again_on_the_same_chunk_is_reported_naming_it(ray_cluster):
    """A route whose scorer kills its process when built: the actor dies on the chunk, so does its replacement."""
    actors = RewardActors({"code": functools.partial(os._exit, 1)}, 1, ready_timeout_s=60)
    try:
        actors.wait_ready()
        rows, completions = code_rows_and_completions()
        with pytest.raises(
            RewardActorError, match=r"reward actor 0 died on node \w+ .* its replacement died on them too"
        ):
            actors.score("code", completions[:1], rows[:1])
        assert actors.restarts == 1
    finally:
        actors.close()


def test_too_few_free_cpus_are_refused_naming_the_field(ray_cluster):
    config = cfg(reward_num_cpus=1000)
    scorer = build_scorer(config)
    with contextlib.ExitStack() as stack, pytest.raises(ConfigError, match=r"reward_num_cpus=1000 needs"):
        start_reward_actors(config, stack, scorer)
    with pytest.raises(RuntimeError, match=r"the math route runs on reward actors \(reward_num_cpus=1000\)"):
        scorer(*reversed(math_rows_and_completions()))


def test_close_leaves_no_actor(ray_cluster):

    config = cfg(reward_num_cpus=1, reward_fn=None)
    scorer = build_scorer(config)
    with contextlib.ExitStack() as stack:
        actors = start_reward_actors(config, stack, scorer)
        actors.wait_ready()
        handles, pids = list(actors.actors), [place["pid"] for place in actors.places]
    # ray.kill is asynchronous: the kill goes through the GCS while a method call goes straight to the actor, so a
    # call made right after close() may still be answered. Each actor must refuse calls within 30 s.
    for handle in handles:
        assert _refuses_calls_within(handle, 30), "a reward actor still answers 30 s after close()"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


def _refuses_calls_within(handle, seconds: float) -> bool:
    """Whether ``handle``'s actor answers ``ready`` with RayActorError (it is dead) before ``seconds`` pass."""
    import ray

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            ray.get(handle.ready.remote(), timeout=max(1.0, deadline - time.monotonic()))
        except ray.exceptions.RayActorError:
            return True
        except ray.exceptions.GetTimeoutError:
            return False
        time.sleep(0.2)
    return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False

"""``reward_num_cpus`` on the driver's side, without Ray: what reward actors are given (picklable builders of the
driver's own scorers, one worker, the config's limits), how the routing scorer holds its cluster routes (nothing
started before they are attached, an error naming the field until then), and the refusals before anything starts.
The actors themselves are tested in tests/distributed/test_distributed_reward_actors.py."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.config import ConfigError
from reasonrl.dataplane.completion import Completion
from reasonrl.rewards.cluster_routes import CLUSTER_ROUTES, RouteBuild, cluster_target
from reasonrl.rewards.code import CodeVerdict
from reasonrl.rewards.routing import build_scorer, routing_problems
from reasonrl.rewards.scorers import CodeScorer, MathScorer
from reasonrl.rewards.shaping import RewardResult
from reasonrl.run.exp_hooks import HookError, build_inputs

CODE_ROW = {
    "id": "c",
    "question": "q",
    "answer": "",
    "data_source": "code",
    "tests": {"inputs": ["1"], "outputs": ["1"]},
}


def cfg(**kw) -> TinyPPOCPUConfig:
    return TinyPPOCPUConfig(**{"reward_fn": None, "verify_timeout_s": 2.5, "code_test_timeout_s": 1.5, **kw})


def test_builders_pickle_and_build_the_drivers_scorers_with_one_worker():
    config = cfg(reward_num_cpus=2, verify_workers=4, code_workers=4, code_reward="fraction", verify_batch_timeout_s=9)
    builds = build_scorer(config).cluster_builds()
    assert set(builds) == set(CLUSTER_ROUTES) == {"math", "code"}
    math = pickle.loads(pickle.dumps(builds["math"]))()  # as an actor receives and calls it
    code = pickle.loads(pickle.dumps(builds["code"]))()
    try:
        assert isinstance(math, MathScorer) and isinstance(code, CodeScorer)
        assert math.verifier.num_workers == 1 and code.sandbox.workers == 1
        assert math.verifier.timeout_s == config.verify_timeout_s
        assert math.verifier.batch_timeout_s == config.verify_batch_timeout_s
        assert math.verifier.config.extract_mode == config.extract_mode
        assert math.reward_config == code.reward_config == config.reward_config()
        assert code.code_config == dataclasses.replace(config.code_reward_config(), workers=1)
    finally:
        math.close()
        code.close()
    with pytest.raises(ValueError, match="does not run on reward actors"):
        RouteBuild("exact_match", builds["math"].settings)


def test_what_travels_to_and_from_an_actor_pickles():
    completion = Completion(3, 1, [1, 2], [5, 6], "```python\nprint(1)\n```", "stop", logprobs=[-0.1, -0.2])
    verdict = CodeVerdict(2, 3, "wrong", "test 2: output '1'", 0.25, True)
    result = RewardResult(0.0, False, "wrong", extracted="print(1)", finish_reason="stop", code_verdict=verdict)
    assert pickle.loads(pickle.dumps(completion)) == completion
    assert pickle.loads(pickle.dumps(result)) == result


def test_cluster_routes_start_nothing_on_the_driver_and_wait_for_their_actors():
    scorer = build_scorer(cfg(reward_num_cpus=2))
    assert scorer.scorers == {}  # the default route (math) starts no pool here
    completion = Completion(0, 0, [1], [5], "\\boxed{1}", "stop")
    with pytest.raises(RuntimeError, match=r"the math route runs on reward actors \(reward_num_cpus=2\)"):
        scorer([completion], [{"id": "m", "question": "q", "answer": "1"}])
    calls = []

    def on_actors(kind):  # stands in for a RayScorer: records what reaches the actors
        def score(completions, rows):
            calls.append((kind, [row["id"] for row in rows]))
            return [RewardResult(1.0, True, kind) for _ in rows]

        return score

    assert cluster_target(scorer) is scorer
    scorer.attach_cluster({kind: on_actors(kind) for kind in CLUSTER_ROUTES})
    rows = [
        {"id": "m", "question": "q", "answer": "1"},
        {"id": "e", "question": "q", "answer": "1", "data_source": "exact_match"},
        CODE_ROW,
    ]
    got = scorer([completion] * 3, rows)
    assert [r.reason for r in got] == ["math", "correct", "code"]  # exact_match scored on the driver
    assert calls == [("math", ["m"]), ("code", ["c"])]
    scorer.detach_cluster()
    with pytest.raises(RuntimeError, match="the code route runs on reward actors"):
        scorer([completion], [CODE_ROW])
    with pytest.raises(ValueError, match="do not run on reward actors"):
        scorer.attach_cluster({"exact_match": on_actors("exact_match")})
    scorer.close()


def test_reward_num_cpus_with_nothing_to_score_on_actors_is_refused():
    rows = {"train_data": [{"id": "u", "question": "q", "answer": "1"}]}
    user = cfg(reward_fn="reasonrl.rewards.pipeline_check:digit_fraction", reward_num_cpus=2)
    (problem,) = routing_problems(user, rows)
    assert problem.startswith("reward_num_cpus=2 starts reward actors for the math and code routes")
    assert "default route 'user'" in problem and "set reward_num_cpus=0" in problem
    assert routing_problems(user, {**rows, "eval_data code": [CODE_ROW]}) == []  # a code row: actors have work
    assert routing_problems(cfg(reward_num_cpus=2), rows) == []  # math by default
    assert routing_problems(dataclasses.replace(user, reward_num_cpus=0), rows) == []


def test_a_negative_reward_num_cpus_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"reward_num_cpus=-1.*must be >= 0"):
        cfg(reward_num_cpus=-1).validate()


class _OwnScorerExp:
    """An experiment whose build_scorer returns a scorer of its own (no cluster routes)."""

    def __init__(self, config):
        self.cfg = config

    def load_train_rows(self):
        return [{"id": i, "question": f"q{i}", "answer": "1"} for i in range(self.cfg.rollout_batch_size)]

    def load_eval_sets(self):
        return {}

    def build_template(self, tokenizer):
        from reasonrl.data import get_template

        return get_template("orz")

    def build_scorer(self):
        return lambda completions, rows: [RewardResult(0.0, False, "own") for _ in rows]


def test_a_scorer_of_its_own_is_refused_with_reward_num_cpus_before_ray():
    with pytest.raises(HookError, match=r"reward_num_cpus=2 runs the math and code routes .* _OwnScorerExp"):
        build_inputs(_OwnScorerExp(cfg(reward_num_cpus=2)), tokenizer=object())
    assert callable(build_inputs(_OwnScorerExp(cfg()), tokenizer=object()).scorer)

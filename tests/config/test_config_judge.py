"""The ``judge_*`` fields refused before anything starts (``reasonrl.config.judge``), each message naming the field
and what to do; the scorer a judge config builds (``reasonrl.rewards.routing.build_scorer``)."""

from __future__ import annotations

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.judge import judge_problems
from reasonrl.rewards.judge import JudgeScorer, JudgeSpecError
from reasonrl.rewards.judge_client import JudgeUrlClient
from reasonrl.rewards.routing import RoutingScorer, build_scorer

URL = "http://127.0.0.1:8000/v1"


def cfg(**kw) -> BasePPOExpConfig:
    return BasePPOExpConfig(**({"pretrain": "tiny", "device": "cpu"} | kw))


def test_good_judges_pass_and_the_default_has_none(tmp_path):
    template = tmp_path / "judge.jinja"
    template.write_text("{{ response }}")
    parse = tmp_path / "parse.py"
    parse.write_text("def f(text):\n    return None\n")
    assert judge_problems(cfg(), {}) == []
    assert judge_problems(cfg(judge_pretrain="tiny"), {}) == []
    assert judge_problems(cfg(judge_url=URL, judge_model="m", judge_parse="last_number:1:10"), {}) == []
    both = cfg(judge_url=URL, judge_model="m", judge_template=str(template), judge_parse=f"{parse}:f")
    assert judge_problems(both, {}) == []
    weights = cfg(judge_pretrain="tiny", judge_weight=0.0, judge_weights={"math": 0.5, "code": 1})
    assert judge_problems(weights, {}) == []


@pytest.mark.parametrize(
    ("fields", "start", "words"),
    [
        ({"judge_pretrain": "tiny", "judge_url": URL, "judge_model": "m"}, "judge_pretrain and judge_url", "one"),
        ({"judge_url": URL}, "judge_url is set but judge_model is not", "model name"),
        ({"judge_url": "ftp://h/v1", "judge_model": "m"}, "judge_url='ftp://h/v1'", "http or https"),
        ({"judge_url": "http:///v1", "judge_model": "m"}, "judge_url='http:///v1' names no host", "vllm serve"),
        ({"judge_pretrain": "tiny", "device": "gpu"}, "judge_pretrain='tiny' with device=gpu", "not yet placed"),
        ({"judge_pretrain": "/no/such/model"}, "judge_pretrain='/no/such/model'", ""),
        ({"judge_pretrain": "tiny", "judge_parse": "maybe"}, "judge_parse='maybe'", "yes_no, boxed"),
        ({"judge_pretrain": "tiny", "judge_parse": "last_number:3:1"}, "judge_parse='last_number:3:1'", "LO < HI"),
        ({"judge_pretrain": "tiny", "judge_parse": "nope.py:f"}, "judge_parse='nope.py:f'", "does not exist"),
        ({"judge_pretrain": "tiny", "judge_template": "no.jinja"}, "judge_template='no.jinja'", "no such file"),
        ({"judge_pretrain": "tiny", "judge_weight": 1.5}, "judge_weight=1.5", "[0, 1]"),
        ({"judge_pretrain": "tiny", "judge_weights": {"math": -1}}, "judge_weights['math']=-1", "[0, 1]"),
        ({"judge_pretrain": "tiny", "judge_weight": 0.0}, "judge_weight=0 and judge_weights=None", "no row"),
        ({"judge_pretrain": "tiny", "judge_weight": 0, "judge_weights": {"a": 0}}, "judge_weight=0 and", "no row"),
        ({"judge_pretrain": "tiny", "judge_max_tokens": 0}, "judge_max_tokens=0", ">= 1"),
        ({"judge_pretrain": "tiny", "judge_temperature": -1.0}, "judge_temperature=-1.0", ">= 0"),
        ({"judge_pretrain": "tiny", "judge_unparsed_reward": float("nan")}, "judge_unparsed_reward=nan", "finite"),
        ({"judge_url_retries": -1}, "judge_url_retries=-1", ">= 0"),
        ({"judge_weights": {"math": 0.5}}, "judge_weights={'math': 0.5} but no judge runs", "judge_pretrain"),
        ({"judge_unparsed_reward": 0.0}, "judge_unparsed_reward=0.0 but no judge runs", "judge_url"),
    ],
)
def test_refusals_name_the_field(fields, start, words):
    problems = judge_problems(cfg(**fields), {})
    assert len(problems) == 1, problems
    assert problems[0].startswith(start), problems[0]
    assert words in problems[0], problems[0]


def test_an_unset_key_variable_is_refused_without_showing_any_value():
    fields = {"judge_url": URL, "judge_model": "m", "judge_url_secret_env": "MY_JUDGE_KEY"}
    (problem,) = judge_problems(cfg(**fields), {"OTHER": "k3y"})
    assert problem.startswith("judge_url_secret_env='MY_JUDGE_KEY': that environment variable is unset"), problem
    assert judge_problems(cfg(**fields), {"MY_JUDGE_KEY": "k3y"}) == []


def test_validate_refuses_before_anything_starts():
    with pytest.raises(ConfigError) as info:
        cfg(judge_url="file:///tmp/x", judge_weight=2.0).validate()
    text = str(info.value)
    assert "judge_url='file:///tmp/x': the scheme must be http or https" in text, text
    assert "judge_weight=2.0: must be in [0, 1]" in text and "judge_model is not" in text


def test_build_scorer_wraps_the_routing_scorer(tmp_path):
    plain = build_scorer(cfg(reward_fn=None, verify_workers=1))
    assert isinstance(plain, RoutingScorer)
    plain.close()
    judged = build_scorer(cfg(judge_url=URL, judge_model="m", verify_workers=1, judge_parse="boxed"))
    try:
        assert isinstance(judged, JudgeScorer) and isinstance(judged.inner, RoutingScorer)
        assert isinstance(judged.generate, JudgeUrlClient) and judged.generate.settings.model == "m"
    finally:
        judged.close()
    engine = build_scorer(cfg(judge_pretrain="tiny", verify_workers=1))
    try:
        assert engine.generate is None  # attached once the run starts the judge engine
    finally:
        engine.close()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}")
    with pytest.raises(JudgeSpecError, match="judge_template"):
        build_scorer(cfg(judge_pretrain="tiny", verify_workers=1, judge_template=str(bad)))

"""The ``reward_url*`` fields refused before anything starts (``reasonrl.config.remote_reward``), each message naming
the field and what to do; the secret is read from the variable the config names, never from a field."""

from __future__ import annotations

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.remote_reward import reward_url_problems

URL = "http://127.0.0.1:8123/v1/score"
ENV = {"REASONRL_REWARD_SECRET": "s3cret"}


def cfg(**kw) -> BasePPOExpConfig:
    return BasePPOExpConfig(pretrain="tiny", device="cpu", **kw)


def test_a_good_service_passes_and_the_default_has_none():
    assert reward_url_problems(cfg(), {}) == []
    assert reward_url_problems(cfg(reward_url=URL), ENV) == []
    assert reward_url_problems(cfg(reward_url="https://rewards.example.com/v1/score"), ENV) == []
    assert reward_url_problems(cfg(reward_url=URL, reward_url_secret_env=None), {}) == []  # no authentication


@pytest.mark.parametrize(
    ("fields", "start", "words"),
    [
        ({"reward_url": "ftp://127.0.0.1/v1/score"}, "reward_url='ftp:", "the scheme must be http or https"),
        ({"reward_url": "127.0.0.1:8123/v1/score"}, "reward_url='127.0.0.1", "the scheme must be http or https"),
        ({"reward_url": "http:///v1/score"}, "reward_url='http:///v1/score' names no host", "e.g. reward_url=http"),
        ({"reward_url": "http://127.0.0.1:99999/x"}, "reward_url='http://127.0.0.1:99999/x' is not a URL", "Port"),
        ({"reward_url": URL, "reward_fn": "r.py:f"}, "reward_url and reward_fn='r.py:f' are both set", "--reward r.py"),
        ({"reward_url_batch_size": 0}, "reward_url_batch_size=0", "must be >= 1"),
        ({"reward_url_concurrency": -1}, "reward_url_concurrency=-1", "must be >= 1"),
        ({"reward_url_retries": -1}, "reward_url_retries=-1", "must be >= 0"),
        ({"reward_url_timeout_s": 0.0}, "reward_url_timeout_s=0.0", "must be > 0 seconds"),
        ({"reward_url_backoff_s": float("nan")}, "reward_url_backoff_s=nan", "must be >= 0 seconds"),
        ({"reward_url_failure_reward": float("inf")}, "reward_url_failure_reward=inf", "finite number"),
    ],
)
def test_refusals_name_the_field(fields, start, words):
    problems = reward_url_problems(cfg(**fields), ENV)
    assert len(problems) == 1, problems
    assert problems[0].startswith(start), problems[0]
    assert words in problems[0], problems[0]


def test_an_unset_secret_variable_is_refused_without_showing_any_value():
    (problem,) = reward_url_problems(cfg(reward_url=URL, reward_url_secret_env="MY_REWARD_KEY"), ENV)
    assert problem.startswith("reward_url_secret_env='MY_REWARD_KEY': that environment variable is unset"), problem
    assert "reward_url_secret_env=none" in problem and "s3cret" not in problem


def test_validate_refuses_before_anything_starts(monkeypatch):
    monkeypatch.delenv("REASONRL_REWARD_SECRET", raising=False)
    with pytest.raises(ConfigError) as info:
        cfg(reward_url="file:///tmp/x", reward_url_retries=-2).validate()
    text = str(info.value)
    assert "reward_url='file:///tmp/x': the scheme must be http or https" in text, text
    assert "reward_url_retries=-2: must be >= 0" in text and "reward_url_secret_env='REASONRL_REWARD_SECRET'" in text

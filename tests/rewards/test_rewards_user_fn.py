"""User reward functions: loading from file / module specs, clear spec errors, failure policy."""

from __future__ import annotations

import textwrap

import pytest
from loguru import logger

from reasonrl.rewards import RewardFnSpecError, UserRewardFn, batched_reward, load_reward_fn

USER_FILE = textwrap.dedent(
    """
    from reasonrl.rewards import batched_reward

    NOT_CALLABLE = 3

    def exact(response, gold):
        return float(response.strip() == gold)

    def with_meta(response, gold, finish_reason, bonus=0.0):
        return (1.0 if finish_reason == "stop" else 0.0) + bonus

    def flaky(response, gold, **meta):
        if response == "boom":
            raise RuntimeError("user bug")
        if response == "nan":
            return float("nan")
        if response == "str":
            return "high"
        return 1.0

    @batched_reward
    def lengths(responses, golds, **meta):
        if any(r == "boom" for r in responses):
            raise ValueError("batch bug")
        return [len(r) for r in responses]

    def bad_length(responses, golds):
        return [1.0]
    bad_length.batched = True

    class Scorer:
        @staticmethod
        def score(response, gold):
            return 0.5
    """
)


@pytest.fixture()
def user_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_FILE)
    return path


@pytest.fixture()
def log_lines():
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


def test_load_from_file_and_call(user_file):
    fn = load_reward_fn(f"{user_file}:exact")
    assert isinstance(fn, UserRewardFn) and not fn.batched
    assert fn(["5", " 6 "], ["5", "5"]) == [1.0, 0.0]
    assert fn(["5"], ["5"], finish_reason=["stop"]) == [1.0]  # unknown keywords are not passed


def test_relative_path_and_dotted_attribute(user_file):
    fn = load_reward_fn("my_rewards.py:Scorer.score", base_dir=user_file.parent)
    assert fn(["x"], ["y"]) == [0.5]


def test_meta_per_sample_and_shared(user_file):
    fn = load_reward_fn(f"{user_file}:with_meta")
    assert fn(["a", "b"], ["a", "b"], finish_reason=["stop", "length"], bonus=0.5) == [1.5, 0.5]


def test_load_from_module():
    fn = load_reward_fn("reasonrl.rewards.repetition:response_repetition", batched=False)
    assert fn.fn.__name__ == "response_repetition"
    assert load_reward_fn("os.path:join")  # any importable callable


def test_batched_function(user_file):
    fn = load_reward_fn(f"{user_file}:lengths")
    assert fn.batched
    assert fn(["ab", "abc"], ["", ""]) == [2.0, 3.0]


def test_batched_failure_retries_per_sample(user_file, log_lines):
    fn = load_reward_fn(f"{user_file}:lengths")
    assert fn(["ab", "boom", "abcd"], ["", "", ""]) == [2.0, 0.0, 4.0]
    assert fn.num_errors == 1
    assert any("batch bug" in line for line in log_lines)


def test_wrong_length_from_batch_fn(user_file):
    fn = load_reward_fn(f"{user_file}:bad_length")
    assert fn(["a", "b"], ["a", "b"]) == [1.0, 1.0]  # retried one by one: each single call returns one score
    fn_bad = UserRewardFn(lambda rs, gs: [], spec="empty", batched=True)
    assert fn_bad(["a", "b"], ["a", "b"]) == [0.0, 0.0]
    assert fn_bad.num_errors == 2


def test_exceptions_and_bad_values_score_zero(user_file, log_lines):
    fn = load_reward_fn(f"{user_file}:flaky")
    scores = fn(["ok", "boom", "nan", "str", "ok"], ["g"] * 5)
    assert scores == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert fn.num_errors == 3 and fn.num_calls == 5
    assert any("RuntimeError: user bug" in line for line in log_lines)
    assert any("non-finite" in line for line in log_lines)


def test_decorator():
    @batched_reward
    def f(responses, golds):
        return [0.0] * len(responses)

    assert f.batched is True
    assert UserRewardFn(f)(["a"], ["b"]) == [0.0]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon_here", "has no ':'"),
        ("file.py:", "both the module/file and the function name"),
        (":fn", "both the module/file and the function name"),
        ("missing_dir/nope.py:fn", "does not exist"),
        ("reasonrl.no_such_module:fn", "module 'reasonrl.no_such_module' not found"),
        ("reasonrl.rewards.shaping:no_such_fn", "has no attribute 'no_such_fn'"),
        ("reasonrl.rewards.shaping:1bad", "not a valid"),
    ],
)
def test_spec_errors(spec, message):
    with pytest.raises(RewardFnSpecError, match=message) as info:
        load_reward_fn(spec)
    assert repr(spec) in str(info.value)


def test_spec_errors_in_files(user_file, tmp_path):
    with pytest.raises(RewardFnSpecError, match=r"is not callable \(it is of type int\)"):
        load_reward_fn(f"{user_file}:NOT_CALLABLE")
    with pytest.raises(RewardFnSpecError, match=r"callables defined there: \[.*'exact'"):
        load_reward_fn(f"{user_file}:nope")
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('needs a missing package')\n")
    with pytest.raises(RewardFnSpecError, match="importing .* raised ImportError: needs a missing package"):
        load_reward_fn(f"{broken}:fn")
    not_py = tmp_path / "rewards.txt"
    not_py.write_text("x")
    with pytest.raises(RewardFnSpecError, match="not a .py file"):
        load_reward_fn(f"{not_py}:fn")

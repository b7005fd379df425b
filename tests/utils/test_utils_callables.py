"""``reasonrl.utils.callables``: the one loader of ``file.py:name`` / ``module:name`` specs (rewards, tools, env_fn)."""

from __future__ import annotations

import pytest

from reasonrl.rewards import RewardFnSpecError
from reasonrl.utils.callables import CallableSpecError, resolve_callable


def test_a_spec_names_a_callable_of_a_module_or_a_file(tmp_path):
    assert resolve_callable("os.path:join") is __import__("os").path.join
    (tmp_path / "fns.py").write_text("class Env:\n    @staticmethod\n    def make():\n        return 3\n")
    assert resolve_callable("fns.py:Env.make", tmp_path)() == 3


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon", "tool spec 'no_colon' has no ':'"),
        ("missing.py:f", "tool spec 'missing.py:f': file .* does not exist"),
        ("os.path:nope", "tool spec 'os.path:nope': 'os.path' has no attribute 'nope'"),
        ("os:sep", r"tool spec 'os:sep': 'sep' is not callable \(it is of type str\)"),
    ],
)
def test_each_error_names_the_loader_and_the_problem(spec, message, tmp_path):
    with pytest.raises(CallableSpecError, match=message):
        resolve_callable(spec, tmp_path, what="tool spec")


def test_the_reward_loader_raises_the_same_error():
    assert RewardFnSpecError is CallableSpecError

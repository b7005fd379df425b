"""env_fn / tools: the factory of a run and the pre-flight checks, with messages naming the field."""

from __future__ import annotations

import re
import textwrap

import pytest

from reasonrl.agents.loading import EnvSpecError, env_fn_problems, load_env_factory, tools_problems
from reasonrl.agents.tool_calls import format_tool_call
from reasonrl.agents.tool_env import ToolEnvironment

ENVS = """
from reasonrl.agents.environment import StepResult


class Good:
    def reset(self, row):
        return None

    def step(self, model_turn):
        return StepResult(done=True)


class NoStep:
    def reset(self, row):
        return None


class NeedsArgs(Good):
    def __init__(self, size):
        self.size = size


def make_good():
    return Good()


def make_nothing():
    return 42


def make_broken():
    raise RuntimeError("no database")


NOT_CALLABLE = 3
"""


@pytest.fixture
def envs(tmp_path):
    (tmp_path / "envs.py").write_text(textwrap.dedent(ENVS))
    (tmp_path / "broken.py").write_text("def oops(:\n")
    return tmp_path


def test_builtin_tools_factory_shares_resolved_tools():
    factory = load_env_factory("tools", tools=("calculator", "python"))
    a, b = factory(), factory()
    assert isinstance(a, ToolEnvironment) and a is not b and a.tools["python"] is b.tools["python"]
    a.reset({})
    assert a.step(format_tool_call("calculator", {"expression": "6*7"})).observation == "42"
    assert env_fn_problems("tools") == [] and env_fn_problems(" tools ") == []


def test_builtin_with_bad_tools():
    with pytest.raises(EnvSpecError, match="unknown tool 'calc'"):
        load_env_factory("tools", tools=["calc"])


@pytest.mark.parametrize("name", ["Good", "make_good"])
def test_good_class_or_factory(envs, name):
    assert env_fn_problems(f"envs.py:{name}", base_dir=envs) == []
    env = load_env_factory(f"envs.py:{name}", base_dir=envs)()
    assert env.reset({}) is None and env.step("x").done


@pytest.mark.parametrize(
    "spec, message",
    [
        ("missing.py:Env", "file .* does not exist; fix the path"),
        ("broken.py:Env", "raised SyntaxError.*fix the error in that file"),
        ("envs.py:Nope", "has no attribute 'Nope'"),
        ("envs.py:NOT_CALLABLE", "is not callable"),
        ("envs.py:NoStep", "the class NoStep has no callable step"),
        ("envs.py:make_nothing", r"the object make_nothing\(\) returns has no callable reset or step"),
        ("envs.py:make_broken", "raised RuntimeError: no database"),
        ("envs.py:NeedsArgs", "cannot be called without arguments"),
        ("no_colon", "is not a spec"),
        ("", "is empty"),
        ("reasonrl_no_such_module:Env", "module 'reasonrl_no_such_module' not found"),
    ],
)
def test_problems_name_env_fn(envs, spec, message):
    problems = env_fn_problems(spec, base_dir=envs)
    assert len(problems) == 1 and "env_fn" in problems[0]
    assert re.search(message, problems[0]), problems[0]
    with pytest.raises(EnvSpecError):
        load_env_factory(spec, base_dir=envs)


def test_missing_name_lists_the_classes_and_functions_of_the_file(envs):
    """The listing names what the file defines: its classes too (a file of environment classes listed none), and
    not the classes it imports (StepResult)."""
    (problem,) = env_fn_problems("envs.py:Nope", base_dir=envs)
    listing = "['Good', 'NeedsArgs', 'NoStep', 'make_broken', 'make_good', 'make_nothing']"
    assert f"callables defined there: {listing}" in problem, problem


def test_module_spec():
    assert env_fn_problems("reasonrl.agents.tool_env:ToolEnvironment") == []


def test_tools_problems(envs):
    assert tools_problems(["calculator", "python"]) == []
    assert tools_problems([])[0].startswith("tools is empty")
    (problem,) = tools_problems(["calculator", "calc"])
    assert "unknown tool 'calc'" in problem and "calculator" in problem
    (problem,) = tools_problems(["calculator", "calculator"])
    assert "both named 'calculator'" in problem
    (problem,) = tools_problems(["missing.py:f"], base_dir=envs)
    assert problem.startswith("tools: tool spec 'missing.py:f'")

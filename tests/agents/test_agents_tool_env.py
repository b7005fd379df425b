"""ToolEnvironment: done without a call, tool outputs as observations, errors counted per tool."""

from __future__ import annotations

import json

import pytest

from reasonrl.agents.environment import Environment, StepResult
from reasonrl.agents.tool_calls import format_tool_call
from reasonrl.agents.tool_env import ToolEnvironment
from reasonrl.agents.tools import tool_from_function


def calc(expression: str) -> str:
    return format_tool_call("calculator", {"expression": expression})


@pytest.fixture
def env():
    env = ToolEnvironment()
    assert env.reset({"question": "q", "answer": "408"}) is None
    return env


def test_is_an_environment(env):
    assert isinstance(env, Environment)
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["calculator"]


def test_no_call_ends_the_episode(env):
    assert env.step("The answer is \\boxed{408}.") == StepResult(done=True)


def test_a_call_answers_with_its_output(env):
    result = env.step("Let me compute.\n" + calc("12*34"))
    assert result == StepResult(observation="408", info={"tool_calls": {"calculator": 1}})


def test_unknown_tool_and_tool_error_are_counted_observations(env):
    result = env.step(format_tool_call("python", {"code": "print(1)"}))
    assert not result.done and result.info == {"tool_errors": {"python": 1}}
    assert "unknown tool 'python'" in json.loads(result.observation)["error"]
    result = env.step(calc("1/0"))
    assert json.loads(result.observation) == {"error": "division by zero"}
    assert result.info == {"tool_errors": {"calculator": 1}}


def test_bad_json_is_counted_as_invalid(env):
    result = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": }</tool_call>')
    assert not result.done and result.info == {"tool_errors": {"invalid": 1}}
    assert "malformed JSON" in json.loads(result.observation)["error"]
    assert env.step("<tool_call>").info == {"tool_errors": {"invalid": 1}}


def test_calls_past_the_cap_are_not_run():
    env = ToolEnvironment(max_calls_per_turn=2)
    env.reset({})
    result = env.step(calc("1+1") + calc("2+2") + calc("3+3"))
    lines = result.observation.split("\n")
    assert lines[:2] == ["2", "4"] and "not run: 'calculator'" in lines[2]
    assert result.info["tool_calls"] == {"calculator": 2} and result.info["tool_calls_skipped"] == {"all": 1}


def test_row_tools_restrict_the_sample():
    echo = tool_from_function(
        lambda text: text, {"name": "echo", "parameters": {"required": ["text"]}}, spec="e.py:echo"
    )
    env = ToolEnvironment(tools=["calculator", echo])
    env.reset({"tools": ["e.py:echo"]})  # by spec or by name
    assert [s["function"]["name"] for s in env.tool_schemas()] == ["echo"]
    assert env.step(calc("1+1")).info == {"tool_errors": {"calculator": 1}}
    assert env.step(format_tool_call("echo", {"text": "hi"})).observation == "hi"
    env.reset({"answer": "1"})
    assert env.step(calc("1+1")).observation == "2"


def test_row_tools_outside_the_config_are_an_error(env):
    with pytest.raises(ValueError, match=r"row 'tools' \['calculator', 'python'\] names \['python'\]"):
        env.reset({"tools": ["calculator", "python"]})
    with pytest.raises(ValueError, match="must be a list"):
        env.reset({"tools": "calculator"})


def test_bad_construction():
    with pytest.raises(ValueError, match="max_calls_per_turn"):
        ToolEnvironment(max_calls_per_turn=0)
    with pytest.raises(ValueError, match="at least one tool"):
        ToolEnvironment(tools=())

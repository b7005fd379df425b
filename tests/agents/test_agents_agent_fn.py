"""agent_fn: loading the user's agent function, the checks before Ray (messages naming the field), running async and
sync functions, and what a function may return."""

from __future__ import annotations

import asyncio
import textwrap
import threading

import pytest

from reasonrl.agents import AgentResult
from reasonrl.agents.agent_fn import AgentResultError, AgentSpecError, agent_fn_problems, as_agent_result, load_agent_fn
from reasonrl.config.probes import _agent_fn_problems

AGENTS = """
import threading

from reasonrl.agents import AgentResult


def run(row, endpoint):
    return AgentResult(reward=row["r"], info={"thread": threading.current_thread().name, "url": endpoint})


async def arun(row, endpoint):
    return row["r"]


def one_arg(row):
    return None


class Agent:
    def __call__(self, row, endpoint):
        return None
"""


@pytest.fixture
def agent_file(tmp_path):
    path = tmp_path / "my_agent.py"
    path.write_text(textwrap.dedent(AGENTS))
    return path


def test_sync_and_async_agents_run_and_return_results(agent_file):
    sync, coro = load_agent_fn(f"{agent_file}:run"), load_agent_fn(f"{agent_file}:arun")
    assert not sync.is_async and coro.is_async
    result = asyncio.run(sync({"r": 0.5}, "http://x"))
    assert result.reward == 0.5 and result.info["url"] == "http://x"
    assert result.info["thread"] != threading.current_thread().name  # a plain function runs in a worker thread
    assert asyncio.run(coro({"r": 2}, None)) == AgentResult(reward=2.0)


def test_problems_name_agent_fn_and_say_what_to_do(agent_file, tmp_path):
    assert agent_fn_problems(f"{agent_file}:run") == [] and _agent_fn_problems(f"{agent_file}:run") == []
    (one_arg,) = agent_fn_problems(f"{agent_file}:one_arg")
    assert "cannot be called as run(row, endpoint)" in one_arg and one_arg.startswith("agent_fn=")
    (cls,) = agent_fn_problems(f"{agent_file}:Agent")
    assert "names the class Agent" in cls
    assert "is a class" in _agent_fn_problems(f"{agent_file}:Agent")[0]  # refused by validate() already
    (missing,) = agent_fn_problems(f"{tmp_path}/nope.py:run")
    assert "does not exist" in missing and "fix the path" in missing
    assert "is not a spec" in agent_fn_problems("run")[0]
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    assert "fix the error in that file" in agent_fn_problems(f"{broken}:run")[0]
    with pytest.raises(AgentSpecError, match="agent_fn .*has no attribute .nothing"):
        load_agent_fn(f"{agent_file}:nothing")


def test_results_are_normalised_or_refused():
    assert as_agent_result(None) == AgentResult()
    assert as_agent_result(1) == AgentResult(reward=1.0)
    for bad, pattern in [
        ("text", "returned str, not an AgentResult"),
        (True, "returned bool"),
        (AgentResult(reward="x"), "not a number"),
        (AgentResult(reward=float("nan")), "not finite"),
        (AgentResult(info=[1]), "not a dict"),
    ]:
        with pytest.raises(AgentResultError, match=pattern):
            as_agent_result(bad)

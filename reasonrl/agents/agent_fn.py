"""``agent_fn``: a user's agent program, trained as it is (docs/agents.md).

    # my_agent.py
    from openai import OpenAI
    from reasonrl.agents import AgentResult

    def run(row: dict, endpoint) -> AgentResult:          # or ``async def run(row, endpoint)``
        client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
        reply = client.chat.completions.create(model=endpoint.model, messages=row["messages"])
        return AgentResult(info={"answer": reply.choices[0].message.content})   # reward None: the verifier decides

``agent_fn=my_agent.py:run`` (or ``package.module:run``) names a function of two arguments, the data row and the
sample's :class:`~reasonrl.agents.gateway.backend.SessionEndpoint`. One call per sample, on the driver: an ``async``
function runs as a task of the rollout's event loop, a plain one in a worker thread. It returns an
:class:`AgentResult` (``None`` counts as ``AgentResult()``; a bare number as its ``reward``).

:func:`agent_fn_problems` is the check before Ray starts (the import, a callable taking ``(row, endpoint)``);
``reasonrl.config.probes._agent_fn_problems`` the cheaper one of ``validate()`` (the file read with ``ast``). Every
message names ``agent_fn`` and says what to do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import os
from collections.abc import Callable
from concurrent.futures import Executor

from reasonrl.utils.callables import CallableSpecError, resolve_callable

FORMS = "agent_fn takes 'path/to/file.py:function' or 'package.module:function', a function run(row, endpoint)"


class AgentSpecError(ValueError):
    """``agent_fn`` cannot be loaded; the message lists the problems."""


class AgentResultError(TypeError):
    """An agent function returned something that is not an :class:`AgentResult` (ends its sample as an error)."""


@dataclasses.dataclass
class AgentResult:
    """What an agent function returns. ``reward``: the agent's own reward of the sample (None: it has none; then the
    row's verifier decides, see ``agent_reward``). ``info``: anything JSON-like, kept in the generation dump."""

    reward: float | None = None
    info: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class AgentFunction:
    """A loaded agent function: ``fn`` and whether it is a coroutine function (awaited) or plain (run in a thread)."""

    fn: Callable
    spec: str
    is_async: bool

    async def __call__(self, row: dict, endpoint, executor: Executor | None = None) -> AgentResult:
        """Run the function on ``row`` / ``endpoint`` and return its :class:`AgentResult` (raises what it raises,
        :class:`AgentResultError` for a result of the wrong type). A plain function runs in ``executor`` (the
        loop's default one when None)."""
        if self.is_async:
            out = await self.fn(row, endpoint)
        else:
            out = await asyncio.get_running_loop().run_in_executor(executor, self.fn, row, endpoint)
            if inspect.isawaitable(out):  # a plain function that returns a coroutine (a lambda around one)
                out = await out
        return as_agent_result(out)


def as_agent_result(out) -> AgentResult:
    """``out`` as an :class:`AgentResult`: itself, ``None`` -> ``AgentResult()``, a finite number -> its reward.
    :class:`AgentResultError` for anything else, or a reward that is not a finite number."""
    if out is None:
        return AgentResult()
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        out = AgentResult(reward=float(out))
    if not isinstance(out, AgentResult):
        raise AgentResultError(f"the agent function returned {type(out).__name__}, not an AgentResult")
    if out.reward is not None:
        try:
            reward = float(out.reward)
        except (TypeError, ValueError):
            raise AgentResultError(f"AgentResult.reward={out.reward!r} is not a number") from None
        if not math.isfinite(reward):
            raise AgentResultError(f"AgentResult.reward={out.reward!r} is not finite")
        out = dataclasses.replace(out, reward=reward)
    if not isinstance(out.info, dict):
        raise AgentResultError(f"AgentResult.info is a {type(out.info).__name__}, not a dict")
    return out


def load_agent_fn(spec: str, base_dir: str | os.PathLike | None = None) -> AgentFunction:
    """The agent function ``spec`` names; :class:`AgentSpecError` naming the problems when it does not load."""
    fn, problems = _resolve(spec, base_dir)
    if problems:
        raise AgentSpecError("; ".join(problems))
    return fn


def agent_fn_problems(spec: str, base_dir: str | os.PathLike | None = None) -> list[str]:
    """Why ``agent_fn=spec`` cannot run (empty when it can): the spec's form, the import, a callable that takes
    ``(row, endpoint)``. Imports the file or module (run it before Ray starts, after ``validate()``)."""
    return _resolve(spec, base_dir)[1]


def _resolve(spec, base_dir) -> tuple[AgentFunction | None, list[str]]:
    if not isinstance(spec, str) or not spec.strip():
        return None, [f"agent_fn={spec!r} is empty; {FORMS}"]
    spec = spec.strip()
    if ":" not in spec:
        return None, [f"agent_fn={spec!r} is not a spec: {FORMS}"]
    try:
        fn = resolve_callable(spec, base_dir, what="agent_fn")
    except CallableSpecError as exc:
        return None, [f"{exc}; {_hint(exc)}"]
    if isinstance(fn, type):
        return None, [
            f"agent_fn={spec!r} names the class {fn.__qualname__}; it must name a function run(row, endpoint) "
            "(one call per sample); write a function that builds and runs your agent"
        ]
    try:
        inspect.signature(fn).bind({}, None)
    except TypeError:
        return None, [
            f"agent_fn={spec!r}: {_name(fn)}{inspect.signature(fn)} cannot be called as run(row, endpoint): it is "
            "called with the data row and the sample's endpoint; give it exactly these two parameters"
        ]
    except ValueError:  # no signature (a builtin): nothing to check
        pass
    is_async = inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))
    return AgentFunction(fn, spec, is_async), []


def _hint(exc: CallableSpecError) -> str:
    text = str(exc)
    if "does not exist" in text:
        return "fix the path (relative paths start at the directory you run from); " + FORMS
    if "raised" in text:
        return "fix the error in that file or module (it is imported before the run starts)"
    if "no attribute" in text:
        return "the part after ':' must name a function defined there"
    return FORMS


def _name(obj) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__

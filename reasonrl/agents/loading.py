"""``env_fn`` and ``tools``: build the environment factory of a run, and check both before Ray starts.

    factory = load_env_factory("tools", tools=("calculator", "python"))   # the built-in ToolEnvironment
    factory = load_env_factory("my_env.py:GuessNumber")                   # a class of yours ...
    factory = load_env_factory("my_pkg.envs:make_env")                    # ... or a zero-argument factory
    env = factory(); env.reset(row); env.step(text)

``env_fn`` is ``"tools"`` or a spec ``path/to/file.py:Name`` / ``package.module:Name`` (loaded like a
``reward_fn``: :func:`reasonrl.utils.callables.resolve_callable`; relative paths from the current directory).
``Name`` is a class whose instances have ``reset(row)`` and ``step(model_turn)``
(:class:`~reasonrl.agents.environment.Environment`), or a function of no arguments that returns such an object.

:func:`env_fn_problems` and :func:`tools_problems` are the pre-flight checks (empty list: fine): the file or
module imports, the name exists and is callable without arguments, and ``reset`` / ``step`` are callable on the
class (a factory is called once to check the object it returns); every tool resolves. Each message names the
field and says what to do.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Sequence

from reasonrl.agents.environment import Environment
from reasonrl.agents.tool_env import ToolEnvironment
from reasonrl.agents.tools import BUILTIN_TOOLS, ToolSpecError, resolve_tools
from reasonrl.utils.callables import CallableSpecError, resolve_callable

BUILTIN_ENV = "tools"
_FORMS = "env_fn takes 'tools' (the built-in tool environment), 'path/to/file.py:Name' or 'package.module:Name'"


class EnvSpecError(ValueError):
    """``env_fn`` or ``tools`` cannot build environments; the message lists the problems."""


def load_env_factory(
    spec: str, *, tools: Sequence[str] = ("calculator",), base_dir: str | os.PathLike | None = None
) -> Callable[[], Environment]:
    """A zero-argument callable that builds one environment per sample (see the module docstring). For
    ``"tools"`` the tools are resolved once, here, and shared by every environment. :class:`EnvSpecError` naming
    the problems when ``spec`` (or a tool) does not load."""
    spec = spec.strip() if isinstance(spec, str) else spec
    if spec == BUILTIN_ENV:
        try:
            resolved = resolve_tools(list(tools), base_dir)
        except ToolSpecError as exc:
            raise EnvSpecError(f"tools={list(tools)!r}: {exc}") from exc
        if not resolved:
            raise EnvSpecError("env_fn='tools' needs at least one tool in tools (e.g. tools=calculator)")
        return functools.partial(ToolEnvironment, tools=resolved)
    factory, problems = _resolve(spec, base_dir)
    if problems:
        raise EnvSpecError("; ".join(problems))
    return factory


def env_fn_problems(spec: str, base_dir: str | os.PathLike | None = None) -> list[str]:
    """Why ``env_fn=spec`` cannot build environments (empty when it can); see the module docstring. ``"tools"``
    has none here: check its tools with :func:`tools_problems`."""
    if isinstance(spec, str) and spec.strip() == BUILTIN_ENV:
        return []
    return _resolve(spec, base_dir)[1]


def tools_problems(names: Sequence[str], base_dir: str | os.PathLike | None = None) -> list[str]:
    """Why ``tools=names`` cannot be used by the built-in tool environment (empty when it can): an unknown
    built-in name, a user function spec that does not load or has no usable schema, two tools of one name."""
    if isinstance(names, str):
        names = [names]
    if not names:
        return [f"tools is empty: env_fn='tools' needs at least one of {sorted(BUILTIN_TOOLS)} or file.py:function"]
    problems = []
    seen: dict[str, str] = {}
    for name in names:
        try:
            (tool,) = resolve_tools([name], base_dir).values()
        except ToolSpecError as exc:
            problems.append(f"tools: {exc}")
            continue
        if tool.name in seen:
            problems.append(f"tools: {seen[tool.name]!r} and {name!r} are both named {tool.name!r}; keep one")
        seen.setdefault(tool.name, name)
    return problems


def _resolve(spec, base_dir) -> tuple[Callable[[], Environment] | None, list[str]]:
    if not isinstance(spec, str) or not spec.strip():
        return None, [f"env_fn={spec!r} is empty; {_FORMS}"]
    spec = spec.strip()
    if ":" not in spec:
        return None, [f"env_fn={spec!r} is not a spec: {_FORMS}"]
    try:
        obj = resolve_callable(spec, base_dir, what="env_fn")
    except CallableSpecError as exc:
        return None, [f"{exc}; {_hint(exc)}"]
    kind = "class" if isinstance(obj, type) else "factory"
    try:
        inspect.signature(obj).bind()
    except TypeError:
        return None, [
            f"env_fn={spec!r}: the {kind} {_name(obj)} cannot be called without arguments (one environment is made "
            f"per sample with no arguments); give its parameters defaults, or point env_fn at a zero-argument factory"
        ]
    except ValueError:  # no signature (a builtin): nothing to check
        pass
    target = obj
    if kind == "factory":
        try:
            target = obj()
        except Exception as exc:
            return None, [
                f"env_fn={spec!r}: calling the factory {_name(obj)}() raised {type(exc).__name__}: {exc}; fix it "
                f"(it runs once per sample)"
            ]
    missing = [m for m in ("reset", "step") if not callable(getattr(target, m, None))]
    if missing:
        what = f"the class {_name(obj)}" if kind == "class" else f"the object {_name(obj)}() returns"
        return None, [
            f"env_fn={spec!r}: {what} has no callable {' or '.join(missing)}; an environment needs "
            f"reset(self, row) -> str | None and step(self, model_turn) -> StepResult (docs/multi_turn.md)"
        ]
    return obj, []


def _hint(exc: CallableSpecError) -> str:
    text = str(exc)
    if "does not exist" in text:
        return "fix the path (relative paths start at the directory you run from); " + _FORMS
    if "raised" in text:
        return "fix the error in that file or module (it is imported before the run starts)"
    if "no attribute" in text:
        return "the part after ':' must name a class or factory defined there"
    return _FORMS


def _name(obj) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__

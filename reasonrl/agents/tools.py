"""Tools: a name, a Python callable and its JSON schema; the built-ins, user functions, and calling one safely.

    tools = resolve_tools(["calculator", "python", "my_tools.py:lookup"])   # {name: Tool}
    text, error = call_tool(tools, ToolCall("calculator", {"expression": "12*34"}))   # ("408", False)

A tool's schema is the OpenAI / Qwen "function" format that ``tokenizer.apply_chat_template(tools=[...])`` takes::

    {"type": "function",
     "function": {"name": "calculator", "description": "...",
                  "parameters": {"type": "object", "properties": {"expression": {"type": "string", ...}},
                                 "required": ["expression"]}}}

Names in a tool list (the config's ``tools``, a row's ``tools``):

* built-ins (:data:`BUILTIN_TOOLS`): ``calculator`` (:mod:`reasonrl.agents.calculator`) and ``python``
  (:mod:`reasonrl.agents.python_tool`, a fresh sandbox per :func:`resolve_tools` call);
* ``path/to/file.py:function`` or ``package.module:function``: a plain function of yours, loaded like a
  ``reward_fn`` (:func:`reasonrl.utils.callables.resolve_callable`); its schema comes from its type hints and
  Google-style docstring (``transformers.utils.get_json_schema``), or from a ``tool_schema`` attribute of the
  function when it has one; the model calls it by the schema's name (the function's name).

:func:`call_tool` never raises: an unknown tool, arguments the tool does not take, a tool that raises, or a result
that is neither text nor JSON come back as ``('{"error": "..."}', True)``; a result is text as is or the JSON of
any other JSON value, cut in the middle past ``max_chars``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reasonrl.agents.calculator import calculate
from reasonrl.agents.episode import cut_middle
from reasonrl.agents.python_tool import PythonTool
from reasonrl.agents.tool_calls import ToolCall, ToolError
from reasonrl.utils.callables import CallableSpecError, resolve_callable

MAX_OUTPUT_CHARS = 4000


class ToolSpecError(ValueError):
    """A tool name or spec that cannot be resolved to a tool; the message names it and says what to do."""


@dataclasses.dataclass(frozen=True)
class Tool:
    """A callable tool. ``schema``: the "function" format of the module docstring (``schema["function"]["name"]
    == name``). ``spec``: the string it was resolved from (a built-in's name, or ``file.py:function``)."""

    name: str
    function: Callable[..., Any]
    schema: dict[str, Any]
    spec: str = ""

    @property
    def required(self) -> list[str]:
        return list(self.schema["function"].get("parameters", {}).get("required", []))


def _calculator_tool() -> Tool:
    schema = _function_schema(
        "calculator",
        "Evaluate an arithmetic expression exactly: + - * / // % ** and parentheses on integers and decimals.",
        {"expression": {"type": "string", "description": 'the expression, e.g. "4821 * 937" or "(2.5 + 3) / 4"'}},
    )
    return Tool("calculator", calculate, schema, "calculator")


def _python_tool() -> Tool:
    schema = _function_schema(
        "python",
        "Run a Python program (standard library only, no network, a few seconds) and return what it printed. "
        "Nothing is kept between calls: print() every value you need.",
        {"code": {"type": "string", "description": "the complete program"}},
    )
    return Tool("python", PythonTool(), schema, "python")


BUILTIN_TOOLS: dict[str, Callable[[], Tool]] = {"calculator": _calculator_tool, "python": _python_tool}


def _function_schema(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    parameters = {"type": "object", "properties": properties, "required": list(properties)}
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def tool_from_function(fn: Callable[..., Any], schema: Mapping[str, Any] | None = None, *, spec: str = "") -> Tool:
    """A :class:`Tool` of a plain function. ``schema``: the "function" format, whole or just its inner
    ``{"name", "description", "parameters"}``; None builds it with ``transformers.utils.get_json_schema(fn)``
    (type hints on every argument, a Google-style docstring with an ``Args:`` entry per argument)."""
    what = f"tool {spec or getattr(fn, '__name__', repr(fn))!r}"
    if not callable(fn):
        raise ToolSpecError(f"{what}: {type(fn).__name__} is not callable")
    if schema is None:
        from transformers.utils import get_json_schema  # lazy: transformers is slow to import

        try:
            schema = get_json_schema(fn)
        except Exception as exc:  # DocstringParsingException, TypeHintParsingException
            raise ToolSpecError(
                f"{what}: cannot build its JSON schema ({type(exc).__name__}: {exc}); give every argument a type "
                "hint and the function a Google-style docstring with an 'Args:' line per argument, or pass a schema"
            ) from exc
    inner = schema.get("function", schema) if isinstance(schema, Mapping) else None
    if not isinstance(inner, Mapping) or not isinstance(inner.get("name"), str) or not inner["name"]:
        raise ToolSpecError(f"{what}: the schema needs a 'name' (the OpenAI/Qwen function format), got {schema!r}")
    inner = dict(inner)
    inner.setdefault("parameters", {"type": "object", "properties": {}})
    return Tool(inner["name"], fn, {"type": "function", "function": inner}, spec or inner["name"])


def load_user_tool(spec: str, base_dir: str | os.PathLike | None = None) -> Tool:
    """The tool of ``path/to/file.py:function`` or ``package.module:function`` (relative paths from ``base_dir``,
    default the current directory); :class:`ToolSpecError` naming the spec when it cannot be loaded."""
    try:
        fn = resolve_callable(spec, base_dir, what="tool spec")
    except CallableSpecError as exc:
        raise ToolSpecError(str(exc)) from exc
    return tool_from_function(fn, getattr(fn, "tool_schema", None), spec=spec)


def resolve_tools(names: Sequence[str], base_dir: str | os.PathLike | None = None) -> dict[str, Tool]:
    """``{tool name: Tool}`` for a list of built-in names and user specs (see the module docstring), in order.
    :class:`ToolSpecError` for an unknown name (listing the built-ins), a spec that does not load, or two tools of
    one name."""
    if isinstance(names, str):
        names = [names]
    tools: dict[str, Tool] = {}
    for raw in names:
        name = raw.strip() if isinstance(raw, str) else raw
        if not isinstance(name, str) or not name:
            raise ToolSpecError(f"tool names must be non-empty strings, got {raw!r} in {list(names)!r}")
        if name in BUILTIN_TOOLS:
            tool = BUILTIN_TOOLS[name]()
        elif ":" in name:
            tool = load_user_tool(name, base_dir)
        else:
            raise ToolSpecError(
                f"unknown tool {name!r}: the built-in tools are {sorted(BUILTIN_TOOLS)}; a function of yours is "
                "'path/to/file.py:function' or 'package.module:function'"
            )
        if tool.name in tools:
            raise ToolSpecError(f"two tools are named {tool.name!r} ({tools[tool.name].spec!r} and {name!r})")
        tools[tool.name] = tool
    return tools


def error_text(message: str) -> str:
    """The observation of a failed call: ``{"error": message}`` as JSON."""
    return json.dumps({"error": message}, ensure_ascii=False)


def call_tool(tools: Mapping[str, Tool], call: ToolCall, *, max_chars: int = MAX_OUTPUT_CHARS) -> tuple[str, bool]:
    """Run one call: ``(output text, False)``, or ``('{"error": "..."}', True)`` (see the module docstring).
    Never raises (``KeyboardInterrupt`` aside)."""
    tool = tools.get(call.name)
    if tool is None:
        return _error(f"unknown tool {call.name!r}; available tools: {', '.join(tools) or 'none'}", max_chars)
    if not isinstance(call.arguments, Mapping):
        return _error(f"the arguments of {call.name!r} must be a JSON object", max_chars)
    missing = [key for key in tool.required if key not in call.arguments]
    if missing:
        return _error(f"tool {call.name!r} is missing its required argument(s) {missing}", max_chars)
    try:
        result = tool.function(**call.arguments)
    except ToolError as exc:
        return _error(str(exc), max_chars)
    except TypeError as exc:  # unexpected or missing keywords (or a TypeError inside the tool)
        return _error(f"bad arguments for tool {call.name!r}: {exc}", max_chars)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the tool's failure is the model's observation
        return _error(f"tool {call.name!r} raised {type(exc).__name__}: {exc}", max_chars)
    if isinstance(result, str):
        return cut_middle(result, max_chars)[0], False
    try:
        text = json.dumps(result, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return _error(f"tool {call.name!r} returned a {type(result).__name__}, which is not text or JSON", max_chars)
    return cut_middle(text, max_chars)[0], False


def _error(message: str, max_chars: int) -> tuple[str, bool]:
    return error_text(cut_middle(message, max_chars)[0]), True

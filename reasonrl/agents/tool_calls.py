"""Tool calls in the Hermes / Qwen format: parse them from a model turn, write them for SFT traces.

The format (what Qwen2.5's chat template writes for an assistant message's ``tool_calls``)::

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "12*34"}}
    </tool_call>

* Whitespace and newlines around the JSON are allowed; a turn may hold several calls, with any text between them.
* ``arguments`` is an object, or a JSON string that holds an object (some models write it the OpenAI way:
  ``"arguments": "{\\"expression\\": \\"12*34\\"}"``). A missing or ``null`` ``arguments`` is ``{}``; ``parameters``
  is accepted in place of ``arguments`` (Llama-style).
* Errors, one message per bad block, never raised: malformed JSON, a JSON value that is not an object, a missing or
  empty ``name``, ``arguments`` that is not an object, a ``<tool_call>`` without its ``</tool_call>`` (a second
  ``<tool_call>`` before the close also leaves the first one unclosed). A ``</tool_call>`` without an opening tag is
  ignored.

Model text is untrusted: it is read with :mod:`json` only, never eval/exec/pickle.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
_SNIPPET_CHARS = 80  # of a bad block, quoted in its error message


class ToolError(Exception):
    """Raise it from a tool to answer the model with its message as the call's error (no exception type added)."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's ``name`` and its keyword ``arguments`` (a JSON object)."""

    name: str
    arguments: dict[str, Any]


def parse_tool_calls(text: str) -> tuple[list[ToolCall], list[str]]:
    """The calls in ``text`` in order, and one error message per block that is not a valid call (see the module
    docstring). ``([], [])``: the turn calls no tool."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    if not isinstance(text, str):
        return calls, [f"the model turn is {type(text).__name__}, not text"]
    pos = text.find(OPEN)
    while pos >= 0:
        start = pos + len(OPEN)
        end = text.find(CLOSE, start)
        next_open = text.find(OPEN, start)
        if end < 0 or 0 <= next_open < end:
            errors.append(f"unclosed {OPEN}: {_snippet(text[start : next_open if next_open >= 0 else len(text)])}")
            pos = next_open
            continue
        call, error = _parse_block(text[start:end])
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
        pos = text.find(OPEN, end + len(CLOSE))
    return calls, errors


def _parse_block(block: str) -> tuple[ToolCall | None, str]:
    body = block.strip()
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested past the parser's depth
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
        return None, f"malformed JSON in {OPEN} ({reason}): {_snippet(body)}"
    if not isinstance(obj, dict):
        return None, f'a tool call must be a JSON object {{"name": ..., "arguments": {{...}}}}, got: {_snippet(body)}'
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, f'a tool call needs a "name" (a non-empty string): {_snippet(body)}'
    arguments = obj.get("arguments", obj.get("parameters"))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return None, f'the "arguments" of {name!r} is a string that is not a JSON object: {_snippet(arguments)}'
    if not isinstance(arguments, dict):
        return None, f'the "arguments" of {name!r} must be a JSON object, got {type(arguments).__name__}'
    return ToolCall(name.strip(), arguments), ""


def _snippet(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= _SNIPPET_CHARS else text[:_SNIPPET_CHARS] + "...")


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of one call, as Qwen2.5's chat template writes it (non-ASCII kept as is)::

    >>> print(format_tool_call("calculator", {"expression": "12*34"}))
    <tool_call>
    {"name": "calculator", "arguments": {"expression": "12*34"}}
    </tool_call>
    """
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"

"""Chat prompts: a row whose prompt is a ``messages`` list of ``{"role", "content"}`` turns.

    messages = [{"role": "system", "content": "Answer in one line."},
                {"role": "user", "content": "What is 2+3?"},
                {"role": "assistant", "content": "5"}]           # a final reference reply: not part of the prompt
    prompt_messages(messages)   # -> the system and user turns
    last_user_text(messages)    # -> "What is 2+3?"
    split_messages(messages)    # -> (the prompt turns, the reply turns after them)

Roles are ``system``, ``user``, ``assistant`` and ``tool``; ``content`` is a string. Tool use comes in two forms,
both kept as given so the chat template renders them:

* Hermes text in an assistant turn's content: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
* OpenAI style: an assistant turn with ``tool_calls: [{"type": "function", "function": {"name", "arguments"}}]``
  (``arguments`` an object or a JSON string; ``content`` may then be ``null`` or absent, read as ``""``).

A ``tool`` turn holds a tool's result (its ``content``; ``name`` / ``tool_call_id`` are kept) and must follow an
assistant turn (another tool turn of the same assistant turn may come between).

The prompt is every turn up to and including the last ``user`` turn; what follows it (a reference reply) may only
be ``assistant`` and ``tool`` turns, and is left out. A conversation that ENDS with a tool turn is a prompt as a
whole: the model continues from the tool's result. Anything else (ShareGPT's ``{"from", "value"}``, a list without
a user turn, a tool turn with no assistant turn before it) is a ``ValueError`` saying what is wrong and naming the
turn (``messages[i]``); callers add which row it is.
"""

from __future__ import annotations

import json
from typing import Any

CHAT_ROLES = ("system", "user", "assistant", "tool")
_TOOL_TURN_KEYS = ("name", "tool_call_id")  # kept on a tool turn when present (strings)


def split_messages(value: Any) -> tuple[list[dict], list[dict]]:
    """``(prompt turns, reply turns)`` of a chat ``messages`` value (see the module docstring): the prompt ends at
    the last user turn, or at the last turn when that is a tool turn; the reply is the assistant and tool turns
    after it (empty for a trailing tool turn). ``ValueError`` naming the turn when ``value`` is malformed."""
    turns = _checked_turns(value)
    users = [i for i, turn in enumerate(turns) if turn["role"] == "user"]
    if not users:
        raise ValueError(f"messages has no user turn (roles: {[t['role'] for t in turns]})")
    if not turns[users[-1]]["content"].strip():
        raise ValueError(f"messages[{users[-1]}] (the last user turn) is empty")
    end = len(turns) if turns[-1]["role"] == "tool" else users[-1] + 1
    for i in range(end, len(turns)):
        if turns[i]["role"] not in ("assistant", "tool"):
            raise ValueError(
                f"messages[{i}] has role {turns[i]['role']!r} after the last user turn; only assistant and tool "
                "turns may follow it (a reference reply)"
            )
    return turns[:end], turns[end:]


def prompt_messages(value: Any) -> list[dict]:
    """The prompt turns of a chat ``messages`` value (see the module docstring), each as ``{"role", "content"}``
    plus an assistant turn's ``tool_calls`` and a tool turn's ``name`` / ``tool_call_id``; ``ValueError`` when
    ``value`` is not a list of such turns with at least one user turn."""
    return split_messages(value)[0]


def last_user_text(messages: Any) -> str:
    """The text of the last user turn of a chat ``messages`` value (the row's ``question``), stripped."""
    turns = prompt_messages(messages)
    return next(t for t in reversed(turns) if t["role"] == "user")["content"].strip()


def _checked_turns(value: Any) -> list[dict]:
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"messages must be a non-empty list of {{role, content}} turns, got {_describe(value)}")
    turns: list[dict] = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
            keys = sorted(turn) if isinstance(turn, dict) else type(turn).__name__
            raise ValueError(f"messages[{i}] is not a {{role, content}} turn (it has {keys})")
        role = turn["role"]
        if role not in CHAT_ROLES:
            raise ValueError(f"messages[{i}] has role {role!r}; roles are {', '.join(CHAT_ROLES)}")
        calls = turn.get("tool_calls")
        if calls is not None and role != "assistant":
            raise ValueError(f"messages[{i}] has tool_calls but role {role!r}; only assistant turns call tools")
        calls = None if calls is None else _checked_calls(calls, i)
        content = turn.get("content")
        if content is None and calls:  # OpenAI style: a turn that only calls tools has content null
            content = ""
        elif "content" not in turn:
            raise ValueError(f"messages[{i}] is not a {{role, content}} turn (it has {sorted(turn)})")
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}] content must be a string, got {type(content).__name__}")
        out = {"role": role, "content": content}
        if calls is not None:
            out["tool_calls"] = calls
        if role == "tool":
            if not _after_assistant(turns):
                raise ValueError(
                    f"messages[{i}] is a tool turn without an assistant turn before it (a tool result answers an "
                    "assistant turn's tool call)"
                )
            for key in _TOOL_TURN_KEYS:
                if key in turn:
                    if not isinstance(turn[key], str):
                        raise ValueError(f"messages[{i}] {key} must be a string, got {type(turn[key]).__name__}")
                    out[key] = turn[key]
        turns.append(out)
    return turns


def _after_assistant(turns: list[dict]) -> bool:
    """Whether the run of tool turns at the end of ``turns`` starts right after an assistant turn."""
    for turn in reversed(turns):
        if turn["role"] != "tool":
            return turn["role"] == "assistant"
    return False


def _checked_calls(calls: Any, i: int) -> list[dict]:
    """An assistant turn's OpenAI-style ``tool_calls``, checked and kept as given."""
    where = f"messages[{i}] tool_calls"
    if not isinstance(calls, (list, tuple)) or not calls:
        raise ValueError(f"{where} must be a non-empty list of {{type, function: {{name, arguments}}}}")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            raise ValueError(f"{where}[{j}] must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}")
        if call.get("type", "function") != "function":
            raise ValueError(f"{where}[{j}] has type {call.get('type')!r}; only 'function' calls are supported")
        name = fn.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}[{j}].function.name must be a non-empty string")
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict):
                raise ValueError(f"{where}[{j}].function.arguments is a string that is not a JSON object")
        elif not isinstance(arguments, dict):
            raise ValueError(
                f"{where}[{j}].function.arguments must be an object or a JSON string, got {type(arguments).__name__}"
            )
        out.append(dict(call))
    return out


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "an empty list"
    return type(value).__name__

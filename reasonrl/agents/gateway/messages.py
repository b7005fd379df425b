"""OpenAI chat messages as the gateway keeps them: normalised for the chat template and for "does this request extend
the session" comparisons, and the model turn split into an OpenAI answer (content and ``tool_calls``).

A message here is a plain dict, already validated by :mod:`reasonrl.agents.gateway.openai_protocol`:

    {"role": "system" | "user" | "assistant" | "tool", "content": str, ...}
    assistant: "tool_calls": [{"id", "type": "function", "function": {"name": str, "arguments": dict}}]
    tool: "tool_call_id": str (when the agent sent one)

``content`` is always a string (``None`` and text parts joined become text) and a tool call's ``arguments`` is a
parsed JSON object, which is what Hugging Face chat templates expect (Qwen2.5's writes ``arguments | tojson``).

Tool calls in a model turn are parsed exactly as ``env_fn=tools`` parses them
(:func:`reasonrl.agents.tool_calls.parse_tool_calls`, Hermes ``<tool_call>{json}</tool_call>`` blocks): a block that
parses becomes an OpenAI tool call, a block that does not stays in ``content`` as the model wrote it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from reasonrl.agents.tool_calls import CLOSE, OPEN, ToolCall, parse_tool_calls


@dataclasses.dataclass(frozen=True)
class ModelReply:
    """One model turn as the agent sees it: ``content`` (the text outside the parsed tool-call blocks, stripped; ""
    when there is none) and the parsed ``calls`` in order, with their deterministic OpenAI ids."""

    content: str
    calls: tuple[ToolCall, ...]
    call_ids: tuple[str, ...]

    def message(self) -> dict:
        """The normalised assistant message the gateway records (and compares later requests with)."""
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            out["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                for cid, c in zip(self.call_ids, self.calls, strict=True)
            ]
        return out

    def openai_tool_calls(self) -> list[dict]:
        """``tool_calls`` as the OpenAI API returns them (``arguments`` a JSON string)."""
        return [
            {
                "id": cid,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for cid, c in zip(self.call_ids, self.calls, strict=True)
        ]


def split_reply(text: str, session_id: str, turn: int) -> ModelReply:
    """Split a model turn's text into content and tool calls (see the module docstring). The blocks are scanned as
    :func:`~reasonrl.agents.tool_calls.parse_tool_calls` scans them, so the calls are the ones it returns; a block
    it reports as an error (bad JSON, no name, unclosed) is left in ``content`` verbatim."""
    pieces: list[str] = []
    calls: list[ToolCall] = []
    done = 0
    pos = text.find(OPEN)
    while pos >= 0:
        start = pos + len(OPEN)
        end = text.find(CLOSE, start)
        next_open = text.find(OPEN, start)
        if end < 0 or 0 <= next_open < end:  # unclosed: stays in the content
            pos = next_open
            continue
        block_calls, _ = parse_tool_calls(text[pos : end + len(CLOSE)])
        if block_calls:
            pieces.append(text[done:pos])
            calls.extend(block_calls)
            done = end + len(CLOSE)
        pos = text.find(OPEN, end + len(CLOSE))
    pieces.append(text[done:])
    content = "".join(pieces).strip()
    ids = tuple(tool_call_id(session_id, turn, i) for i in range(len(calls)))
    return ModelReply(content, tuple(calls), ids)


def tool_call_id(session_id: str, turn: int, index: int) -> str:
    """A tool call's id: deterministic per session, model turn and position (``call_`` + 24 hex digits)."""
    digest = hashlib.sha256(f"{session_id}/{turn}/{index}".encode()).hexdigest()
    return f"call_{digest[:24]}"


def same_message(request: dict, recorded: dict) -> bool:
    """Does a request's message equal the recorded one? Assistant messages are compared with what the gateway
    returned: content (surrounding whitespace and ``None`` vs "" ignored) and tool calls (name and arguments as parsed
    JSON objects, so re-serialised JSON with other spacing or key order is the same call; ids are not compared).
    Other messages: role and content."""
    if request.get("role") != recorded.get("role"):
        return False
    if recorded.get("role") == "assistant":
        return (request.get("content") or "").strip() == (recorded.get("content") or "").strip() and _calls(
            request
        ) == _calls(recorded)
    return request.get("content") == recorded.get("content")


def _calls(message: dict) -> list[tuple[str, Any]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or ()]


def tools_key(tools: list[dict] | None) -> str:
    """A canonical text of a request's ``tools`` (key order ignored): a session whose tools change forks."""
    return json.dumps(tools or [], sort_keys=True, ensure_ascii=False)


class MessageError(ValueError):
    """A message the gateway cannot use; ``param`` names the field (``messages.2.tool_calls.0.function.arguments``)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def normalize_messages(messages: list[dict]) -> list[dict]:
    """OpenAI messages (plain dicts, roles already checked) in the normalised form of the module docstring:
    ``developer`` becomes ``system``; ``content`` text (``None`` → "", text parts joined); a tool call's JSON
    ``arguments`` parsed. Raises :class:`MessageError` naming the field."""
    return [_normalize(m, f"messages.{i}") for i, m in enumerate(messages)]


def _normalize(message: dict, where: str) -> dict:
    role = message["role"]
    out: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": _text(message, where)}
    if role == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = [_call(c, f"{where}.tool_calls.{j}") for j, c in enumerate(message["tool_calls"])]
    if role == "tool" and message.get("tool_call_id") is not None:
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("name") is not None and role != "tool":
        out["name"] = message["name"]
    return out


def _text(message: dict, where: str) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for k, part in enumerate(content):
        if part.get("type") != "text":
            raise MessageError(
                f"only text content parts are supported, got {part.get('type')!r}", f"{where}.content.{k}.type"
            )
        parts.append(part.get("text", ""))
    return "".join(parts)


def _call(call: dict, where: str) -> dict:
    function = call["function"]
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise MessageError("tool call arguments must be a JSON object", f"{where}.function.arguments") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise MessageError("tool call arguments must be a JSON object", f"{where}.function.arguments")
    return {
        "id": call.get("id") or "",
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }

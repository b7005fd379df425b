"""The OpenAI Chat Completions wire format, as the gateway honours it: request validation (a malformed request is an
OpenAI-style 400 naming the field), the answer, its streamed chunks, ``/v1/models``, and error bodies.

This is the one module allowed to import vLLM's OpenAI server code (``vllm.entrypoints``; docs/architecture.md). It
does not, for now, and says why: vLLM 0.32's ``vllm.entrypoints.openai.chat_completion.protocol`` imports
``vllm.config``, torch and ``torch._inductor`` (4,607 modules, 550 MB resident, 13 s of wall time and 15 s of CPU on
this project's 2-core machine when quiet, 69 s while the test suite ran beside it; it initialises no device), which
the driver process that hosts the gateway otherwise never loads and no unit test can afford; and its
``ChatCompletionRequest`` validates ``messages`` as a loose union that accepts an unknown ``role`` (``{"role":
"bogus"}`` passes), so the 400-naming-the-field contract needed checks of our own anyway. So the request is a
pydantic model restricted to the fields the gateway honours, plus explicit refusals, and the answers are plain dicts
in the format of ``openai.types.chat.ChatCompletion`` / ``ChatCompletionChunk`` (the tests read them back with the
official ``openai`` client). Tool calls are parsed by our Hermes parser (:mod:`reasonrl.agents.tool_calls`, the one
``env_fn=tools`` uses), not vLLM's, so both paths read a model turn the same way.

Request fields:

* honoured: ``messages`` (roles ``system``/``developer``, ``user``, ``assistant`` with ``tool_calls``, ``tool``;
  text content, as a string or text parts), ``tools`` (function tools, passed to the chat template), ``tool_choice``
  ``"auto"``, ``stream``, ``stream_options.include_usage``, ``stop`` (up to 4 strings);
* narrowed only: ``temperature``, ``top_p``, ``max_tokens`` / ``max_completion_tokens`` (the smaller of the two) may
  lower the run's values; higher values are clamped to the run's;
* ignored: ``model`` (any name reaches the policy), ``logprobs``, ``top_logprobs``, ``seed`` (the run seeds each
  turn), ``parallel_tool_calls``, ``user``, ``metadata``, ``store``, ``service_tier``, ``reasoning_effort``, and any
  field not listed here;
* refused with a 400 naming the field: ``n`` other than 1, ``tool_choice`` other than ``"auto"``, non-zero
  ``frequency_penalty`` / ``presence_penalty``, a non-empty ``logit_bias``, a ``response_format`` other than text,
  non-text content parts (images, audio, files), ``functions`` / ``function_call`` (the legacy API), ``echo``.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reasonrl.agents.gateway.messages import MessageError, ModelReply, normalize_messages
from reasonrl.agents.gateway.sessions import ChatTurnRequest, TurnAnswer

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP = 4


class ProtocolError(Exception):
    """An error answered in OpenAI's format: ``status``, ``message``, ``param`` (the field), ``type``, ``code``."""

    def __init__(self, status: int, message: str, param: str | None = None, *, type_: str | None = None, code=None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")
        self.code = code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _StreamOptions(BaseModel):
    include_usage: bool | None = False


class _Request(BaseModel):
    model_config = ConfigDict(extra="ignore")

    messages: list[dict[str, Any]] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    n: int | None = 1
    stream: bool | None = False
    stream_options: _StreamOptions | None = None
    stop: str | list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    echo: bool | None = None


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    """A validated request: the session's view (:class:`ChatTurnRequest`) and the answer's shape."""

    turn: ChatTurnRequest
    stream: bool
    include_usage: bool


def parse_chat_request(body: Any) -> ParsedRequest:
    """Validate a chat-completions body; :class:`ProtocolError` (400, the field named) when it is malformed or asks
    for what the gateway refuses (see the module docstring)."""
    if not isinstance(body, dict):
        raise ProtocolError(400, "the request body must be a JSON object")
    try:
        req = _Request.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        param = ".".join(str(part) for part in err["loc"]) or None
        raise ProtocolError(400, f"{param}: {err['msg']}", param) from None
    _refusals(req)
    messages = [_checked_message(m, i) for i, m in enumerate(req.messages)]
    tools = [_checked_tool(t, i) for i, t in enumerate(req.tools)] if req.tools else None
    try:
        normalized = normalize_messages(messages)
    except MessageError as exc:
        raise ProtocolError(400, f"{exc.param}: {exc}", exc.param) from None
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    if len(stop) > MAX_STOP:
        raise ProtocolError(400, f"stop: at most {MAX_STOP} stop strings", "stop")
    caps = [v for v in (req.max_tokens, req.max_completion_tokens) if v is not None]
    turn = ChatTurnRequest(
        messages=normalized,
        tools=tools,
        max_tokens=min(caps) if caps else None,
        temperature=req.temperature,
        top_p=req.top_p,
        stop=stop,
    )
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    return ParsedRequest(turn=turn, stream=bool(req.stream), include_usage=include_usage)


def _refusals(req: _Request) -> None:
    if req.n not in (None, 1):
        raise ProtocolError(400, f"n: only n=1 is supported (one sample per request), got {req.n}", "n")
    if req.tool_choice not in (None, "auto"):
        raise ProtocolError(400, "tool_choice: only 'auto' is supported (the model decides)", "tool_choice")
    for name in ("frequency_penalty", "presence_penalty"):
        if getattr(req, name):
            raise ProtocolError(400, f"{name}: penalties would change the sampled policy; not supported", name)
    if req.logit_bias:
        raise ProtocolError(400, "logit_bias: not supported (it would change the sampled policy)", "logit_bias")
    if req.response_format and req.response_format.get("type") != "text":
        raise ProtocolError(400, "response_format: only {'type': 'text'} is supported", "response_format")
    if req.functions is not None or req.function_call is not None:
        param = "functions" if req.functions is not None else "function_call"
        raise ProtocolError(400, f"{param}: the legacy functions API is not supported; use tools", param)
    if req.echo:
        raise ProtocolError(400, "echo: not supported", "echo")


def _checked_message(message: Any, i: int) -> dict:
    where = f"messages.{i}"
    if not isinstance(message, dict):
        raise ProtocolError(400, f"{where}: a message must be an object", where)
    role = message.get("role")
    if role not in ROLES:
        raise ProtocolError(400, f"{where}.role: must be one of {list(ROLES)}, got {role!r}", f"{where}.role")
    content = message.get("content")
    if content is None and role != "assistant":
        raise ProtocolError(400, f"{where}.content: a {role} message needs content", f"{where}.content")
    if content is not None and not isinstance(content, (str, list)):
        raise ProtocolError(400, f"{where}.content: must be a string or a list of parts", f"{where}.content")
    for k, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
            raise ProtocolError(400, f"{where}.content.{k}: a content part must be an object", f"{where}.content.{k}")
    calls = message.get("tool_calls")
    if calls is not None and role != "assistant":
        raise ProtocolError(400, f"{where}.tool_calls: only assistant messages carry tool calls", f"{where}.tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise ProtocolError(400, f"{where}.tool_calls: must be a list", f"{where}.tool_calls")
    for j, call in enumerate(calls or ()):
        field = f"{where}.tool_calls.{j}.function"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ProtocolError(400, f"{field}.name: a tool call needs a function name", f"{field}.name")
    return message


def _checked_tool(tool: Any, i: int) -> dict:
    where = f"tools.{i}"
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise ProtocolError(400, f"{where}.type: only function tools are supported", f"{where}.type")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise ProtocolError(400, f"{where}.function.name: a tool needs a function name", f"{where}.function.name")
    return {"type": "function", "function": function}


def new_completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def _message(reply: ModelReply) -> dict:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.content if reply.content or not reply.calls else None,
    }
    if reply.calls:
        message["tool_calls"] = reply.openai_tool_calls()
    return message


def _usage(answer: TurnAnswer) -> dict:
    total = answer.prompt_tokens + answer.completion_tokens
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens, "total_tokens": total}


def completion_body(answer: TurnAnswer, model: str, completion_id: str) -> dict:
    """The non-streamed answer (``chat.completion``)."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": _message(answer.reply), "finish_reason": answer.finish_reason, "logprobs": None}
        ],
        "usage": _usage(answer),
    }


def stream_events(answer: TurnAnswer, model: str, completion_id: str, include_usage: bool) -> list[str]:
    """The streamed answer as server-sent events, built from the finished turn (the whole content in one chunk, the
    tool calls in the next, then the finish reason; ``data: [DONE]`` last)."""
    created = int(time.time())

    def chunk(delta: dict, finish: str | None = None, *, choices: bool = True, usage: dict | None = None) -> str:
        body: dict[str, Any] = {"id": completion_id, "object": "chat.completion.chunk", "created": created}
        body["model"] = model
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}] if choices else []
        if usage is not None:
            body["usage"] = usage
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    events = [chunk({"role": "assistant", "content": ""})]
    if answer.reply.content:
        events.append(chunk({"content": answer.reply.content}))
    calls = answer.reply.openai_tool_calls()
    if calls:
        events.append(chunk({"tool_calls": [dict(call, index=i) for i, call in enumerate(calls)]}))
    events.append(chunk({}, answer.finish_reason))
    if include_usage:
        events.append(chunk({}, choices=False, usage=_usage(answer)))
    events.append("data: [DONE]\n\n")
    return events


def models_body(model: str) -> dict:
    """``GET /v1/models``: the one model a session serves."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "reasonrl"}]}


STREAM_MEDIA_TYPE = "text/event-stream"

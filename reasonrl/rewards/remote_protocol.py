"""The wire format of remote rewards (docs/model_rewards.md, "Remote rewards"), shared by the client
(:mod:`reasonrl.rewards.remote`) and the server (``python -m reasonrl.reward_server``): plain JSON, checked field by
field, never evaluated.

Request, ``POST /v1/score`` with ``Authorization: Bearer <secret>``::

    {"version": 1, "items": [{"response": str, "answer": str, "data_source": str | null,
                              "finish_reason": str, "response_length": int, "row": {...}}, ...]}

Response (same length and order as ``items``)::

    {"version": 1, "results": [{"reward": float, "correct": bool, "info": {...}}, ...]}

An error is ``{"error": {"message": str, "index": int | null, "field": str | null}}`` with a 4xx/5xx status.
``info`` is free-form; the client reads ``info["reason"]`` and ``info["extracted"]`` when they are strings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSION = 1
SCORE_PATH = "/v1/score"
HEALTH_PATH = "/health"
ITEM_FIELDS = ("response", "answer", "data_source", "finish_reason", "response_length", "row")


class ProtocolError(ValueError):
    """A request or response that breaks the protocol: ``message`` names the item ``index`` and ``field``."""

    def __init__(self, message: str, *, index: int | None = None, field: str | None = None):
        where = "" if index is None else f"item {index}" + ("" if field is None else f" field {field!r}") + ": "
        super().__init__(where + message)
        self.index, self.field = index, field

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "index": self.index, "field": self.field}}


@dataclass(frozen=True)
class ScoreItem:
    """One item of a request, as the server scores it. It has what a scorer reads of a completion (``text``,
    ``finish_reason``, ``token_ids``): ``token_ids`` is ``range(response_length)``, since the scorers only take its
    length (the DAPO overlong penalty), and token ids do not travel."""

    response: str
    answer: str
    data_source: str | None
    finish_reason: str
    response_length: int
    row: dict[str, Any]

    @property
    def text(self) -> str:
        return self.response

    @property
    def token_ids(self) -> range:
        return range(self.response_length)


def item_payload(completion: Any, row: Mapping[str, Any]) -> dict[str, Any]:
    """The request item of one sample: the completion's text, finish reason and length, and its data row (the row
    must be JSON: loaded rows are)."""
    return {
        "response": completion.text,
        "answer": str(row.get("answer", "")),
        "data_source": row.get("data_source"),
        "finish_reason": completion.finish_reason,
        "response_length": len(completion.token_ids),
        "row": dict(row),
    }


def parse_request(body: Any, max_items: int) -> list[ScoreItem]:
    """The items of a request body (already JSON-decoded). Raises :class:`ProtocolError` naming the item and field
    of the first problem; a request of more than ``max_items`` items raises ``OverflowError`` (the server's 413)."""
    if not isinstance(body, dict):
        raise ProtocolError(f"the body is a JSON {type(body).__name__}, not an object with 'items'")
    if body.get("version", PROTOCOL_VERSION) != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {body.get('version')!r}; this server speaks {PROTOCOL_VERSION}")
    items = body.get("items")
    if not isinstance(items, list):
        raise ProtocolError("'items' must be a list of objects", field="items")
    if len(items) > max_items:
        raise OverflowError(f"{len(items)} items in one request; this server takes at most {max_items}")
    return [_parse_item(i, item) for i, item in enumerate(items)]


def _parse_item(i: int, item: Any) -> ScoreItem:
    if not isinstance(item, dict):
        raise ProtocolError(f"is a JSON {type(item).__name__}, not an object", index=i)
    unknown = sorted(set(item) - set(ITEM_FIELDS))
    if unknown:
        raise ProtocolError(f"unknown field(s) {unknown}; the fields are {list(ITEM_FIELDS)}", index=i)
    checks = (
        ("response", lambda v: isinstance(v, str), "a string"),
        ("answer", lambda v: isinstance(v, str), "a string"),
        ("finish_reason", lambda v: isinstance(v, str), "a string"),
        ("response_length", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "an integer >= 0"),
    )
    for name, ok, what in checks:
        if name not in item:
            raise ProtocolError("is missing", index=i, field=name)
        if not ok(item[name]):
            raise ProtocolError(f"must be {what}, got {type(item[name]).__name__}", index=i, field=name)
    source = item.get("data_source")
    if source is not None and not isinstance(source, str):
        raise ProtocolError(f"must be a string or null, got {type(source).__name__}", index=i, field="data_source")
    row = item.get("row", {})
    if not isinstance(row, dict):
        raise ProtocolError(f"must be an object, got {type(row).__name__}", index=i, field="row")
    row = dict(row)
    row["answer"] = item["answer"]  # the item's gold is the one scored (a scorer reads row["answer"])
    return ScoreItem(item["response"], item["answer"], source, item["finish_reason"], item["response_length"], row)


def result_payload(result: Any) -> dict[str, Any]:
    """The response entry of one ``RewardResult``; ``info`` carries its reason, extracted answer (a string or
    null) and, for a code row, the test verdict's status and counts."""
    info: dict[str, Any] = {"reason": result.reason}
    if isinstance(result.extracted, str):
        info["extracted"] = result.extracted
    verdict = getattr(result, "code_verdict", None)
    if verdict is not None:
        info["code_status"] = verdict.status
        info["tests_passed"], info["tests_total"] = verdict.passed, verdict.total
    return {"reward": float(result.reward), "correct": bool(result.correct), "info": info}


@dataclass(frozen=True)
class RemoteResult:
    """One parsed entry of a response."""

    reward: float
    correct: bool
    info: dict[str, Any]


def parse_response(body: Any, expected: int) -> list[RemoteResult]:
    """The results of a response body (JSON-decoded) for a request of ``expected`` items. Raises
    :class:`ProtocolError` (the client retries it) for anything else: not an object, the wrong length, a reward
    that is not a finite number, ``correct`` not a bool, ``info`` not an object."""
    if not isinstance(body, dict) or not isinstance(body.get("results"), list):
        raise ProtocolError("the response is not an object with a 'results' list")
    results = body["results"]
    if len(results) != expected:
        raise ProtocolError(f"{len(results)} results for {expected} items")
    return [_parse_result(i, r) for i, r in enumerate(results)]


def _parse_result(i: int, entry: Any) -> RemoteResult:
    if not isinstance(entry, dict):
        raise ProtocolError(f"result is a JSON {type(entry).__name__}, not an object", index=i)
    reward = entry.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise ProtocolError(f"must be a finite number, got {reward!r}"[:120], index=i, field="reward")
    correct = entry.get("correct", False)
    if not isinstance(correct, bool):
        raise ProtocolError(f"must be true or false, got {correct!r}"[:120], index=i, field="correct")
    info = entry.get("info", {})
    if not isinstance(info, dict):
        raise ProtocolError(f"must be an object, got {type(info).__name__}", index=i, field="info")
    return RemoteResult(float(reward), correct, info)


def error_message(body: Any, fallback: str) -> str:
    """The message of an error body, else ``fallback`` (a short cut of the raw text)."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        if isinstance(message, str):
            return message
    return fallback


def batches(n: int, size: int) -> Sequence[range]:
    """The index ranges of ``n`` items cut into requests of at most ``size``."""
    return [range(start, min(start + size, n)) for start in range(0, n, size)]

"""Values checked against, or parsed from text into, the field annotations (``bool``, ``int``, ``float``, ``str``,
``X | None``, ``list[...]``, ``dict[...]``, ``Literal``), and the type names used in messages."""

from __future__ import annotations

import functools
import json
import types
import typing
from typing import Any, Literal, Union

from reasonrl.config.names import _FALSE, _TRUE


class _BadValue(ValueError):
    pass


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(tp: Any, value: Any, *, from_text: bool) -> Any:
    """``value`` as type ``tp``: parsed from text when ``from_text``, else checked (ints accepted as floats,
    tuples as lists). Raises ``_BadValue``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if from_text and type(None) in args and isinstance(value, str) and value.strip().lower() in ("none", "null"):
            return None
        options = sorted((a for a in args if a is not type(None)), key=lambda a: a is str)
        if from_text and isinstance(value, str):  # JSON-looking text means the JSON option, never the str one
            for start, kind in (("{", dict), ("[", list)):
                json_options = [a for a in options if a is kind or typing.get_origin(a) is kind]
                if value.strip().startswith(start) and json_options:
                    options = json_options
        errors = []
        for option in options:
            try:
                return _convert(option, value, from_text=from_text)
            except _BadValue as exc:
                errors.append(str(exc))
        raise _BadValue("; ".join(e for e in errors if e))
    if origin is Literal:
        if value in args:
            return value
        raise _BadValue(f"one of {list(args)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        if from_text and isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise _BadValue("use true/false, 1/0, yes/no")
        raise _BadValue("")
    if tp is int:
        if isinstance(value, bool):
            raise _BadValue("")
        if isinstance(value, int):
            return value
        if from_text and isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
            try:
                number = float(value)
            except ValueError:
                raise _BadValue("not a number") from None
            if number.is_integer() and abs(number) < 2**53:
                return int(number)
            raise _BadValue("not an integer")
        raise _BadValue("")
    if tp is float:
        if isinstance(value, bool):
            raise _BadValue("")
        if isinstance(value, (int, float)):
            return float(value)
        if from_text and isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise _BadValue("not a number") from None
        raise _BadValue("")
    if tp is str:
        if isinstance(value, str):
            return value
        raise _BadValue("")
    if origin is list or tp is list:
        (elem,) = args or (Any,)
        items_from_text = from_text
        if from_text and isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise _BadValue(f"invalid JSON list: {exc}") from None
                items_from_text = False
            else:
                value = [] if not text else [part.strip() for part in text.split(",")]
        if isinstance(value, (list, tuple)):
            return [_convert(elem, item, from_text=items_from_text) for item in value]
        raise _BadValue("")
    if origin is dict or tp is dict:
        key_t, val_t = args or (Any, Any)
        if from_text and isinstance(value, str):
            if not value.strip().startswith("{"):
                raise _BadValue("expected a JSON object")
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise _BadValue(f"invalid JSON object: {exc}") from None
        if isinstance(value, dict):
            return {_convert(key_t, k, from_text=False): _convert(val_t, v, from_text=False) for k, v in value.items()}
        raise _BadValue("")
    if isinstance(tp, type):
        if isinstance(value, tp):
            return value
        raise _BadValue("")
    return value  # an annotation we cannot check (Callable, a TypeVar, ...)


def _type_name(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in sorted(args, key=lambda a: a is type(None)))
    if tp is type(None):
        return "none"
    if tp is bool:
        return "bool (true/false)"
    if origin is list or tp is list:
        return f"list of {_type_name(args[0]) if args else 'values'} (a,b or a JSON list)"
    if origin is dict or tp is dict:
        return "a JSON object"
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    return getattr(tp, "__name__", str(tp))

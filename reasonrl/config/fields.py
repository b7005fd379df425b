"""Field declaration (``_f`` and one shorthand per group) and reading a field's metadata, default and type."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import MISSING, field, fields
from typing import Any

from reasonrl.config.names import GROUPS


def _f(group: str, default: Any = MISSING, doc: str = "", *, factory: Any = None) -> Any:
    meta = {"group": group, "help": doc}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


_exp = functools.partial(_f, "experiment")
_res = functools.partial(_f, "resources")
_mod = functools.partial(_f, "models")
_dat = functools.partial(_f, "data")
_rol = functools.partial(_f, "rollout")
_alg = functools.partial(_f, "algorithm")
_opt = functools.partial(_f, "optimisation")
_evl = functools.partial(_f, "evaluation")
_log = functools.partial(_f, "logging")


def _annotation_text(f: dataclasses.Field, hints: Mapping[str, Any] | None = None) -> str:
    tp = (hints or {}).get(f.name, f.type)
    if isinstance(tp, str):
        return tp
    text = str(tp) if typing.get_origin(tp) else getattr(tp, "__name__", str(tp))
    return text.replace("typing.", "").replace("NoneType", "None")


def _field_default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def _ordered_fields(cls: type) -> list[dataclasses.Field]:
    """Fields grouped in GROUPS order (fields a subclass adds without a group come last, as ``custom``)."""
    order = {g: i for i, g in enumerate(GROUPS)}
    indexed = list(enumerate(fields(cls)))
    indexed.sort(key=lambda p: (order.get(_field_meta(cls, p[1]).get("group", "custom"), len(order)), p[0]))
    return [f for _, f in indexed]


def _field_meta(cls: type, f: dataclasses.Field) -> Mapping[str, Any]:
    """The field's group/help metadata; a subclass that re-declares a field (``actor_lr: float = 1e-5``) keeps
    the metadata of the base class's declaration."""
    if "group" in f.metadata:
        return f.metadata
    for klass in cls.__mro__[1:]:
        base = getattr(klass, "__dataclass_fields__", {}).get(f.name)
        if base is not None and "group" in base.metadata:
            return base.metadata
    return f.metadata

"""``field=value`` overrides: parsing the command line, ``DEBUG_MODE``, applying overrides to a config
(``with_overrides``) and building a recipe from the command line (``from_cli``)."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from reasonrl.config.convert import _BadValue, _convert, _type_hints, _type_name
from reasonrl.config.errors import ConfigError, _close
from reasonrl.config.names import _FALSE, _TRUE

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def parse_overrides(argv: Sequence[str]) -> dict[str, str]:
    """``["actor_lr=1e-6", "--seed=3"]`` -> ``{"actor_lr": "1e-6", "seed": "3"}`` (raw strings; the config parses
    them by field type). Leading dashes are dropped and ``-`` in names becomes ``_``; the last value of a repeated
    field wins. A token without ``=`` is a :class:`ConfigError`."""
    out: dict[str, str] = {}
    problems = []
    for token in argv:
        key, sep, value = token.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or not key:
            problems.append(f"{token!r} is not a field=value override (e.g. actor_lr=1e-6; list fields: a,b or [..])")
            continue
        out[key] = value
    if problems:
        raise ConfigError(problems, title="bad command line")
    return out


def debug_mode_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``DEBUG_MODE`` asks for a debug run: 1/true/yes/on -> True; unset, empty, 0/false/no/off -> False;
    anything else is a :class:`ConfigError` (never silently on or off). Read when called, never at import."""
    value = (os.environ if environ is None else environ).get("DEBUG_MODE", "").strip().lower()
    if value in _TRUE:
        return True
    if value in ("", *_FALSE):
        return False
    raise ConfigError(
        [f"DEBUG_MODE={value!r}: use DEBUG_MODE=1 for a debug run, or 0 / unset"], title="bad environment"
    )


def apply_overrides(cfg: BasePPOExpConfig, overrides: Mapping[str, Any], *, strict: bool = True):
    """A copy of ``cfg`` with ``overrides`` applied: see :meth:`BasePPOExpConfig.with_overrides`."""
    hints = _type_hints(type(cfg))
    names = [f.name for f in fields(cfg)]
    values: dict[str, Any] = {}
    problems = []
    for key, raw in overrides.items():
        if key not in names:
            if strict:
                problems.append(f"unknown field {key!r}{_close(key, names, n=3)}; see --help for all fields")
            continue
        try:
            values[key] = _convert(hints[key], raw, from_text=isinstance(raw, str))
        except _BadValue as exc:
            problems.append(f"{key}={raw!r}: expected {_type_name(hints[key])}" + (f" ({exc})" if str(exc) else ""))
    if problems:
        raise ConfigError(problems, title="bad override")
    return dataclasses.replace(cfg, **values)


def config_from_cli(
    cls: type[BasePPOExpConfig], argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None
):
    """An instance of ``cls`` from the command line: see :meth:`BasePPOExpConfig.from_cli`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(cls.help_text())
        raise SystemExit(0)
    overrides = parse_overrides(argv)
    cfg = cls()
    debug = debug_mode_requested(environ)
    if "debug" in overrides:
        try:
            debug = debug or _convert(bool, overrides["debug"], from_text=True)
        except _BadValue:
            pass  # with_overrides reports it
    if debug:
        cfg = cfg.apply_debug_mode()
    return cfg.with_overrides(overrides)

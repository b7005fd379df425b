"""A config as JSON: ``to_dict``, ``save_json`` (atomic) and ``from_json`` delegate here."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reasonrl.config.convert import _BadValue, _convert, _type_hints, _type_name
from reasonrl.config.errors import ConfigError, _close
from reasonrl.config.model_paths import pin_record

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def config_to_dict(cfg: BasePPOExpConfig) -> dict[str, Any]:
    """See :meth:`BasePPOExpConfig.to_dict`."""
    return {f.name: _plain(getattr(cfg, f.name)) for f in fields(cfg)}


def save_config_json(cfg: BasePPOExpConfig, path: str | os.PathLike) -> Path:
    """See :meth:`BasePPOExpConfig.save_json`."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"_class": f"{type(cfg).__module__}.{type(cfg).__qualname__}", **pin_record(cfg), **cfg.to_dict()}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_config_json(cls: type[BasePPOExpConfig], path: str | os.PathLike, *, strict: bool = True):
    """See :meth:`BasePPOExpConfig.from_json`."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    with open(path) as f:
        data = json.load(f)
    values = {k: v for k, v in data.items() if not k.startswith("_")}
    hints = _type_hints(cls)
    names = {f.name for f in fields(cls)}
    problems, parsed = [], {}
    for key, value in values.items():
        if key not in names:
            if strict:
                problems.append(f"{path}: unknown field {key!r}{_close(key, names, n=3)}")
            continue
        try:
            parsed[key] = _convert(hints[key], value, from_text=False)
        except _BadValue:
            problems.append(f"{path}: {key}={value!r}: expected {_type_name(hints[key])}")
    if problems:
        raise ConfigError(problems, title=f"cannot load {cls.__name__}")
    return cls(**parsed)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value

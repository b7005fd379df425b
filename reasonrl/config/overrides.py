"""``field=value`` overrides: parsing the command line, ``DEBUG_MODE``, applying overrides to a config
(``with_overrides``), ``config=<file>`` (a JSON or YAML file of field values, e.g. a checkpoint's config.json) and
building a recipe from the command line (``from_cli``)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
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


def apply_overrides(cfg: Any, overrides: Mapping[str, Any], *, strict: bool = True, source: str | None = None):
    """A copy of ``cfg`` (any config dataclass) with ``overrides`` applied: see
    :meth:`BasePPOExpConfig.with_overrides`. ``source`` (a file name) prefixes every problem: where the values came
    from."""
    hints = _type_hints(type(cfg))
    names = [f.name for f in fields(cfg)]
    where = f"{source}: " if source else ""
    values: dict[str, Any] = {}
    problems = []
    for key, raw in overrides.items():
        if key not in names:
            if strict:
                problems.append(f"{where}unknown field {key!r}{_close(key, names, n=3)}; see --help for all fields")
            continue
        try:
            values[key] = _convert(hints[key], raw, from_text=isinstance(raw, str))
        except _BadValue as exc:
            expected = _type_name(hints[key]) + (f" ({exc})" if str(exc) else "")
            problems.append(f"{where}{key}={raw!r}: expected {expected}")
    if problems:
        raise ConfigError(problems, title=f"bad config file {source}" if source else "bad override")
    return dataclasses.replace(cfg, **values)


# ------------------------------------------------------------------------------------------------ config=<file>
CONFIG_FILE_ARG = "config"  # ``config=<file.json|file.yaml>``: a reserved name, not a field
CONFIG_FILE_NAMES = ("config.json", "sft_config.json")  # what ``config=<folder>`` looks for (RL, then SFT saves)


def config_file_usage() -> str:
    """The lines ``--help`` prints about ``config=`` (RL recipes and SFT)."""
    return (
        "usage: python -m <recipe> [config=<file.json|file.yaml>] [field=value ...]\n"
        "  config=<file>: start from the field values of a JSON or YAML file (a checkpoint's config.json, or its\n"
        "      folder, works as is); field=value overrides on the same command line win over the file's values"
    )


def split_config_file(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """``["config=a.yaml", "seed=3"]`` -> ``("a.yaml", ["seed=3"])``: the ``config=`` argument (also ``--config=``)
    and the other arguments. More than one ``config=`` is a :class:`ConfigError` (one file, then overrides)."""
    paths, rest = [], []
    for token in argv:
        key, sep, value = token.partition("=")
        if sep and key.strip().lstrip("-") == CONFIG_FILE_ARG:
            paths.append(value.strip())
        else:
            rest.append(token)
    if len(paths) > 1:
        raise ConfigError(
            [f"config= given {len(paths)} times ({', '.join(paths)}): give one file, then field=value overrides"],
            title="bad command line",
        )
    if paths and not paths[0]:
        raise ConfigError(["config= needs a file: config=<file.json|file.yaml>"], title="bad command line")
    return (paths[0] if paths else None), rest


def read_config_file(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    """The field values of a JSON (``.json``) or YAML (``.yaml`` / ``.yml``) file, as ``(file, mapping)``. A folder
    means its ``config.json`` (what every RL checkpoint stores) or ``sft_config.json`` (SFT checkpoints). Keys
    starting with ``_`` (``_class``) are kept: :func:`config_file_overrides` reads and drops them. Raises
    :class:`ConfigError` for a missing file, a parse error or a file that is not a mapping."""
    path = Path(path).expanduser()
    if path.is_dir():
        found = [path / name for name in CONFIG_FILE_NAMES if (path / name).is_file()]
        if not found:
            raise ConfigError([f"config={path}: the folder has none of {list(CONFIG_FILE_NAMES)}"], title="bad config")
        path = found[0]
    if not path.is_file():
        raise ConfigError([f"config={path}: no such file"], title="bad config")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        data = _parse_yaml(path, text)
    elif path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError([f"config={path}: invalid JSON: {exc}"], title="bad config") from None
    else:
        raise ConfigError([f"config={path}: use a .json, .yaml or .yml file"], title="bad config")
    if data is None:
        data = {}  # an empty YAML file
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise ConfigError([f"config={path}: expected a mapping of field: value, got a {kind}"], title="bad config")
    return path, data


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            [f"config={path}: reading YAML needs PyYAML: pip install pyyaml (or use a .json file)"], title="bad config"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"config={path}: invalid YAML: {exc}"], title="bad config") from None


def config_file_overrides(
    cls: type, path: str | os.PathLike, *, python_only: Sequence[str] = (), any_class: bool = False
) -> tuple[Path, dict]:
    """``(file, values)``: the field values of ``path`` (:func:`read_config_file`) for config class ``cls``, to apply
    with :func:`apply_overrides` (which checks names and types). The file's ``_class`` (written by ``save_json``)
    must name ``cls`` or one of its parents (``any_class``: any class, e.g. evaluation reads any training run's
    file); a Hugging Face model's config.json is refused with what to do instead. ``python_only`` fields
    (in-memory data) may only be null in a file."""
    path, data = read_config_file(path)
    if "model_type" in data or "architectures" in data:
        raise ConfigError(
            [f"config={path} is a model's config.json (Hugging Face), not a run config: use pretrain=<its folder>"],
            title="bad config",
        )
    saved_class = data.get("_class")
    if saved_class is not None and not any_class and not _names_class_or_parent(str(saved_class), cls):
        parents = [k.__name__ for k in cls.__mro__[1:] if dataclasses.is_dataclass(k)]
        accepted = " or ".join([cls.__name__, *parents])
        raise ConfigError(
            [
                f"config={path} was written by {saved_class}, but this run's config class is {cls.__name__} (a file "
                f"of {accepted} fits): run the recipe that wrote it, or delete the file's _class line to use its "
                "values here"
            ],
            title="bad config",
        )
    problems, values = [], {}
    for key, value in data.items():
        if key.startswith("_"):
            continue  # metadata such as _class
        if key in python_only:
            if value is not None:
                problems.append(f"{path}: {key}={value!r} is in-memory data (Python only): remove it from the file")
            continue
        values[key] = value
    if problems:
        raise ConfigError(problems, title=f"bad config file {path}")
    return path, values


def _names_class_or_parent(saved: str, cls: type) -> bool:
    """Whether ``saved`` (``module.QualName``) names ``cls`` or a parent. A recipe run as ``python -m
    playground.x`` is ``__main__.XConfig``, so ``__main__`` matches any module with the same class name."""
    for klass in cls.__mro__:
        if saved == f"{klass.__module__}.{klass.__qualname__}":
            return True
        main_form = saved.startswith("__main__.") and saved[len("__main__.") :] == klass.__qualname__
        if main_form or (klass.__module__ == "__main__" and saved.endswith(f".{klass.__qualname__}")):
            return True
    return False


def apply_config_file(cfg: Any, path: str | os.PathLike, *, python_only: Sequence[str] = ()):
    """``cfg`` with the values of the file ``path`` (:func:`config_file_overrides`), checked like overrides."""
    file, values = config_file_overrides(type(cfg), path, python_only=python_only)
    return apply_overrides(cfg, values, source=str(file))


def config_from_cli(
    cls: type[BasePPOExpConfig],
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    python_only: Sequence[str] = (),
    debug_mode: bool = True,
):
    """An instance of ``cls`` from the command line: see :meth:`BasePPOExpConfig.from_cli` (and
    ``SFTConfig.from_cli``: ``python_only`` fields are refused in a config file, ``debug_mode=False`` has no
    ``DEBUG_MODE``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help", "help") for a in argv):
        print(config_file_usage() + "\n\n" + cls.help_text())
        raise SystemExit(0)
    config_path, argv = split_config_file(argv)
    overrides = parse_overrides(argv)
    cfg = cls()
    if config_path is not None:
        cfg = apply_config_file(cfg, config_path, python_only=python_only)
    if not debug_mode:
        return cfg.with_overrides(overrides)
    debug = debug_mode_requested(environ)
    if "debug" in overrides:
        try:
            debug = debug or _convert(bool, overrides["debug"], from_text=True)
        except _BadValue:
            pass  # with_overrides reports it
    if debug:
        cfg = cfg.apply_debug_mode()
    return cfg.with_overrides(overrides)

"""reasoning-gym tasks named as data sources: ``train_data=gym:chain_sum:size=2000:seed=0``.

Syntax (colon-separated, no spaces, safe unquoted in a shell and in a comma-separated list)::

    gym:<task>[:<key>=<value>]...

    gym:basic_arithmetic                                  # 1000 rows, seed 0
    gym:chain_sum:size=2000:seed=0:min_terms=2:max_terms=4
    gym:countdown:size=500:seed=100000:operators=+|-|*     # a list option: values separated by |

* ``<task>``: a reasoning-gym dataset name (``python -m reasonrl.data.gym_source`` lists them with their options).
* ``size`` (default :data:`DEFAULT_SIZE` = 1000): the number of rows.
* ``seed`` (default :data:`DEFAULT_SEED` = 0): reasoning-gym generates entry ``i`` from the random seed
  ``seed + i``, so a source covers the entry seeds ``[seed, seed + size)``; two sources of the same task and
  options share entries exactly when these ranges intersect (``seed=0:size=1000`` and ``seed=500`` do). Give an
  eval source a seed at or beyond the training range (``seed >= train seed + train size``).
* ``allow_unsafe_scorer=true``: permit a task whose scorer evaluates model output (``reasonrl.data.gym``).
* any other key: a field of the task's config dataclass (``min_terms``, ``max_digits``, ``difficulty``, ...),
  converted to the type of its default (``true``/``false`` for booleans; ``a|b|c`` for lists).

:func:`check_gym_source` checks all of this without generating a row (it imports reasoning-gym and builds the
task's config, whose ``validate()`` checks the values). :func:`gym_source_identity` gives one key per entry seed,
so the train/eval source overlap check refuses overlapping seed ranges of the same task and options; identical
questions from disjoint ranges (small tasks repeat themselves) are left to the question-level overlap check.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.machinery
import importlib.util
import json
import re
import sys
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from reasonrl.data.errors import DataFormatError

GYM_PREFIX = "gym:"
DEFAULT_SIZE = 1000
DEFAULT_SEED = 0
RESERVED_KEYS = ("size", "seed", "allow_unsafe_scorer")
MAX_SIZE = 1_000_000
LIST_SEPARATOR = "|"
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
LIST_TASKS_HINT = "python -m reasonrl.data.gym_source lists the tasks and their options"


@dataclass(frozen=True)
class GymSourceSpec:
    """A parsed ``gym:`` source: the task, its size and seed, and the task options that differ from their defaults
    (converted to JSON values, sorted, so equal sources compare equal)."""

    task: str
    size: int = DEFAULT_SIZE
    seed: int = DEFAULT_SEED
    options: tuple[tuple[str, Any], ...] = ()
    allow_unsafe_scorer: bool = False

    @property
    def options_json(self) -> str:
        """The options as the ``config`` JSON of a row's ``gym`` reference (``reasonrl.data.gym.GymSource``)."""
        return json.dumps(dict(self.options), sort_keys=True)


def is_gym_source(text: str) -> bool:
    """Whether a data source string names a reasoning-gym task (starts with ``gym:``)."""
    return isinstance(text, str) and text.startswith(GYM_PREFIX)


def _fail(text: str, message: str) -> DataFormatError:
    return DataFormatError(f"data source {text!r}: {message}")


def _registry(text: str) -> dict[str, tuple[type, type]]:
    """reasoning-gym's ``{task: (dataset class, config class)}``; a missing package is a ``DataFormatError``."""
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        raise _fail(
            text, "reasoning-gym is not installed: pip install -e .[gym] (or pip install reasoning-gym==0.1.25)"
        ) from None
    return DATASETS


# A top-level ``register_dataset(NAME, ...)`` call of a reasoning-gym module, and a module constant ``NAME = "..."``.
_REGISTER_CALL = re.compile(r"""^register_dataset\(\s*("[^"\n]+"|'[^'\n]+'|[A-Za-z_]\w*)\s*,""", re.M)
_CONSTANT = re.compile(r"""^([A-Za-z_]\w*)\s*=\s*["']([^"'\n]+)["']\s*$""", re.M)


@functools.lru_cache(maxsize=1)
def _task_index() -> dict[str, str]:
    """``{task: module}`` of every ``register_dataset`` call of the installed reasoning-gym, read from its source
    files (a text scan: nothing is imported); empty when reasoning-gym is not installed or the scan finds nothing.
    ``tests/data/test_gym_source.py`` checks it against the registry an import fills."""
    try:
        spec = importlib.util.find_spec("reasoning_gym")
    except (ImportError, ValueError):
        return {}
    if spec is None or not spec.submodule_search_locations:
        return {}
    index: dict[str, str] = {}
    for root in map(Path, spec.submodule_search_locations):
        for path in sorted(root.rglob("*.py")):
            try:
                source = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if "register_dataset(" not in source:
                continue
            constants = dict(_CONSTANT.findall(source))
            parts = path.relative_to(root).with_suffix("").parts
            module = ".".join(("reasoning_gym", *(parts[:-1] if parts[-1] == "__init__" else parts)))
            for arg in _REGISTER_CALL.findall(source):
                name = arg[1:-1] if arg[0] in "\"'" else constants.get(arg)
                if name:
                    index[name] = module
    return index


def _task_config_class(text: str, task: str) -> type:
    """The config class of reasoning-gym task ``task``; the ``DataFormatError`` of an unknown task (with the
    closest names) otherwise. The task's own module is imported alone when reasoning-gym is not imported yet
    (:func:`_import_task_alone`): importing the package imports every task (sympy, matplotlib: 1-2 s), which a
    refusal should not wait for."""
    index = {} if "reasoning_gym" in sys.modules else _task_index()
    names = list(index) or list(_registry(text))
    if task not in names:
        close = difflib.get_close_matches(task, names, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise _fail(text, f"reasoning-gym has no task {task!r}; {hint}({LIST_TASKS_HINT})")
    if index:
        config_cls = _import_task_alone(task, index[task])
        if config_cls is not None:
            return config_cls
    return _registry(text)[task][1]


_LOADED_ALONE: dict[str, type] = {}  # task -> config class, of _import_task_alone


def _import_task_alone(task: str, module: str) -> type | None:
    """The config class ``module`` (a reasoning-gym task module) registers for ``task``, imported without running
    the ``__init__`` of the packages above it (they are put in ``sys.modules`` unexecuted, as namespaces); None
    when that fails (the caller then imports the whole package). Every ``reasoning_gym`` module imported here is
    dropped from ``sys.modules`` afterwards, so that a later ``import reasoning_gym`` runs as usual; None at once
    when reasoning-gym is imported already. Cached: validation parses a source several times (its check, duplicate
    and train/eval overlap checks)."""
    if task in _LOADED_ALONE:
        return _LOADED_ALONE[task]
    if any(m == "reasoning_gym" or m.startswith("reasoning_gym.") for m in sys.modules):
        return None
    parts = module.split(".")
    try:
        parent_path = None
        for i in range(1, len(parts)):
            package = ".".join(parts[:i])
            if parent_path is None:
                spec = importlib.util.find_spec(package)
            else:
                spec = importlib.machinery.PathFinder.find_spec(package, parent_path)
            if spec is None or spec.submodule_search_locations is None:
                return None
            sys.modules[package] = importlib.util.module_from_spec(spec)  # a package whose __init__ did not run
            parent_path = list(spec.submodule_search_locations)
        # coaching first, as the package's own import order has it: reasoning_gym.factory imports coaching, whose
        # experiment module imports composite, which needs the factory complete (a task module first is a cycle)
        importlib.import_module("reasoning_gym.coaching")
        importlib.import_module(module)
        _LOADED_ALONE[task] = sys.modules["reasoning_gym.factory"].DATASETS[task][1]
        return _LOADED_ALONE[task]
    except Exception:  # noqa: BLE001 - anything unexpected: the caller imports the whole package instead
        return None
    finally:
        for name in [m for m in sys.modules if m == "reasoning_gym" or m.startswith("reasoning_gym.")]:
            del sys.modules[name]


def _parse_bool(text: str, key: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise _fail(text, f"{key}={value!r} is not a boolean; write true or false")


def _parse_int(text: str, key: str, value: str, minimum: int | None = None) -> int:
    try:
        number = int(value)
    except ValueError:
        raise _fail(text, f"{key}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise _fail(text, f"{key}={number} must be >= {minimum}")
    return number


def _guess(value: str) -> Any:
    """A value of unknown type: an integer, a float, a boolean word, else the string."""
    for convert in (int, float):
        try:
            return convert(value)
        except ValueError:
            pass
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def _convert(text: str, task: str, key: str, value: str, default: Any) -> Any:
    """``value`` converted to the type of the option's default (a JSON value: lists for tuples); a type a string
    cannot give (dates, enums, nested configs) is refused."""
    if isinstance(default, Enum):
        pass  # refused below: reasoning-gym code reads enum attributes (``.value``), which a string lacks
    elif isinstance(default, bool):
        return _parse_bool(text, key, value)
    elif isinstance(default, int):
        return _parse_int(text, key, value)
    elif isinstance(default, float):
        try:
            return float(value)
        except ValueError:
            raise _fail(text, f"{key}={value!r} is not a number") from None
    elif isinstance(default, str):
        return value
    elif default is None:
        return _guess(value)
    elif isinstance(default, (list, tuple)):
        first = default[0] if default else None
        if first is None or (isinstance(first, (bool, int, float, str)) and not isinstance(first, Enum)):
            items = [] if value == "" else value.split(LIST_SEPARATOR)
            return [_guess(i) if first is None else _convert(text, task, key, i, first) for i in items]
    raise _fail(
        text,
        f"option {key!r} of {task} holds a {type(default).__name__}, which a source string cannot give; use "
        "reasonrl.data.gym.GymSource in Python (a custom BasePPOExp.load_train_rows) to set it",
    )


def _option_defaults(config_cls: type) -> dict[str, Any]:
    """``{field: default}`` of a task's config dataclass, ``seed`` and ``size`` left out (None when required)."""
    out = {}
    for f in dataclasses.fields(config_cls):
        if f.name in ("seed", "size"):
            continue
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def parse_gym_source(text: str) -> GymSourceSpec:
    """Parse and check a ``gym:`` source (see the module docstring); raises ``DataFormatError`` naming it."""
    if not is_gym_source(text):
        raise DataFormatError(f"data source {text!r} is not a reasoning-gym source (gym:<task>[:key=value]...)")
    task, *parts = text[len(GYM_PREFIX) :].split(":")
    if not task:
        raise _fail(text, f"no task name after 'gym:'; write gym:<task>[:key=value]... ({LIST_TASKS_HINT})")
    given: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise _fail(text, f"{part!r} is not key=value; write gym:<task>:size=1000:seed=0:<option>=<value>")
        if key in given:
            raise _fail(text, f"{key!r} is given twice")
        given[key] = value
    size = _parse_int(text, "size", given.pop("size", str(DEFAULT_SIZE)), minimum=1)
    if size > MAX_SIZE:  # the overlap check keeps one key per entry seed
        raise _fail(text, f"size={size} is more than {MAX_SIZE} rows: split it into several sources (seed ranges)")
    seed = _parse_int(text, "seed", given.pop("seed", str(DEFAULT_SEED)), minimum=0)
    unsafe = _parse_bool(text, "allow_unsafe_scorer", given.pop("allow_unsafe_scorer", "false"))
    config_cls = _task_config_class(text, task)
    from reasonrl.rewards.gym import UNSAFE_TASKS

    if task in UNSAFE_TASKS and not unsafe:
        raise _fail(
            text,
            f"the scorer of {task} runs eval/sympy parse_expr on model output; add :allow_unsafe_scorer=true to "
            "use it anyway (scoring runs in hard-timeout, memory-limited worker processes)",
        )
    defaults = _option_defaults(config_cls)
    options = {}
    for key, value in given.items():
        if key not in defaults:
            known = ", ".join(f"{k}={_jsonable(v)!r}" for k, v in defaults.items()) or "none"
            close = difflib.get_close_matches(key, list(defaults) + list(RESERVED_KEYS), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise _fail(
                text,
                f"{task} has no option {key!r}; {hint}its options (with defaults): {known}; plus size and seed",
            )
        converted = _convert(text, task, key, value, defaults[key])
        if converted != _jsonable(defaults[key]):
            options[key] = converted
    _check_config(text, task, config_cls, options, size, seed)
    return GymSourceSpec(task, size, seed, tuple(sorted(options.items())), unsafe)


def _check_config(text: str, task: str, config_cls: type, options: dict, size: int, seed: int) -> None:
    """Build the task's config (cheap, no rows) and run its ``validate()``, as ``create_dataset`` would."""
    try:
        config = config_cls(**options, seed=seed, size=size)
        if callable(getattr(config, "validate", None)):
            config.validate()
    except Exception as exc:  # reasoning-gym checks with assert / ValueError; any failure is a bad option
        detail = str(exc) or _failed_check(exc)
        raise _fail(text, f"the options {options or '(defaults)'} are not valid for {task}: {detail}") from None


def _failed_check(exc: BaseException) -> str:
    """A message for an exception without one (reasoning-gym's bare ``assert``): the source line that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    line = frames[-1].line if frames else None
    return f"{type(exc).__name__} at `{line}`" if line else type(exc).__name__


def check_gym_source(text: str) -> None:
    """Check a ``gym:`` source without generating rows; raises ``DataFormatError`` with the fix."""
    parse_gym_source(text)


def gym_source_rows(text: str) -> list[dict]:
    """The rows of a ``gym:`` source (``reasonrl.data.gym.GymSource``): ``id``, ``question``, ``answer``,
    ``source`` and the ``gym`` reference that routes each row to the reasoning-gym scorer."""
    from reasonrl.data.gym import GymSource

    spec = parse_gym_source(text)
    source = GymSource(
        spec.task, size=spec.size, seed=spec.seed, allow_unsafe_scorer=spec.allow_unsafe_scorer, **dict(spec.options)
    )
    return source.rows()


def _spelled(value: Any) -> str:
    """An option value as a source string writes it (``true``, ``3``, ``a|b``)."""
    if isinstance(value, list):
        return LIST_SEPARATOR.join(_spelled(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def canonical_gym_source(text: str) -> str:
    """The one spelling of a ``gym:`` source (``gym:<task>:size=..:seed=..`` then non-default options, sorted):
    two strings that generate the same rows give the same text (for duplicate checks)."""
    spec = parse_gym_source(text)
    options = "".join(f":{key}={_spelled(value)}" for key, value in spec.options)
    unsafe = ":allow_unsafe_scorer=true" if spec.allow_unsafe_scorer else ""
    return f"{GYM_PREFIX}{spec.task}:size={spec.size}:seed={spec.seed}{options}{unsafe}"


def gym_source_identity(text: str) -> set[tuple]:
    """One key per entry seed ``seed + i`` (i < size) of the task and options: two sources share data exactly when
    their keys intersect (the same seed range start overlaps; disjoint seed ranges do not). Raises as
    :func:`check_gym_source` does."""
    spec = parse_gym_source(text)
    options = "" if not spec.options else " " + spec.options_json
    return {
        ("gym", f"reasoning-gym {spec.task}{options} entry of seed {s}")
        for s in range(spec.seed, spec.seed + spec.size)
    }


def config_gym_sources(cfg) -> list[str]:
    """The ``gym:`` sources among the config's ``train_data`` and ``eval_data``."""
    sources = [*(getattr(cfg, "train_data", None) or ()), *(getattr(cfg, "eval_data", None) or ())]
    return [s for s in sources if is_gym_source(s)]


def allowed_unsafe_tasks(cfg) -> frozenset[str]:
    """The reasoning-gym tasks with an ``eval``-based scorer that the config allows: those of its ``gym:`` sources
    that say ``allow_unsafe_scorer=true``. A data row can never allow one itself."""
    allowed = set()
    for source in config_gym_sources(cfg):
        try:
            spec = parse_gym_source(source)
        except DataFormatError:
            continue  # reported by config validation
        if spec.allow_unsafe_scorer:
            allowed.add(spec.task)
    return frozenset(allowed)


def gym_sources(cfg):
    """What the config's ``gym:`` sources tell reward routing (:class:`reasonrl.rewards.routing.GymSources`): the
    ``eval``-based tasks they allow, and whether there is any (the gym scorer then starts with the run)."""
    from reasonrl.rewards.routing import GymSources

    return GymSources(allowed_unsafe=allowed_unsafe_tasks(cfg), named=bool(config_gym_sources(cfg)))


def describe_tasks() -> str:
    """Every reasoning-gym task with its options and their defaults, one task a line (unsafe scorers marked)."""
    from reasonrl.rewards.gym import UNSAFE_TASKS

    lines = []
    for task, (_, config_cls) in sorted(_registry("gym:").items()):
        options = " ".join(f"{k}={_jsonable(v)!r}" for k, v in _option_defaults(config_cls).items())
        mark = "  [needs allow_unsafe_scorer=true]" if task in UNSAFE_TASKS else ""
        lines.append(f"gym:{task}  {options}{mark}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe_tasks())

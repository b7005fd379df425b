"""A callable named by a spec string, ``path/to/file.py:name`` or ``package.module:name`` (a dotted name after the
colon reaches into a class or object). User reward functions (:mod:`reasonrl.rewards.user_fn`), tools and environment
factories (:mod:`reasonrl.agents`) are all loaded with :func:`resolve_callable`; a relative file path starts at
``base_dir`` (default: the current directory), and a file is imported once per process under a name derived from its
absolute path.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class CallableSpecError(ValueError):
    """The spec string does not name a loadable callable; the message says what is wrong."""


def _load_module_from_file(spec: str, path_str: str, base_dir: str | os.PathLike | None, what: str = "spec"):
    path = Path(path_str).expanduser()
    if not path.is_absolute():
        path = Path(base_dir or os.getcwd()) / path
    path = path.resolve()
    if not path.is_file():
        raise CallableSpecError(f"{what} {spec!r}: file {str(path)!r} does not exist")
    if path.suffix != ".py":
        raise CallableSpecError(f"{what} {spec!r}: {str(path)!r} is not a .py file")
    name = "reasonrl_user_reward_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise CallableSpecError(f"{what} {spec!r}: cannot load {str(path)!r} as a module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise CallableSpecError(f"{what} {spec!r}: importing {str(path)!r} raised {type(exc).__name__}: {exc}") from exc
    return module


def _import_module(spec: str, name: str, what: str = "spec"):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise CallableSpecError(
            f"{what} {spec!r}: module {name!r} not found ({exc}); use 'package.module:fn' for an "
            "importable module or 'path/to/file.py:fn' for a file"
        ) from exc
    except Exception as exc:
        raise CallableSpecError(f"{what} {spec!r}: importing {name!r} raised {type(exc).__name__}: {exc}") from exc


def resolve_callable(spec: str, base_dir: str | os.PathLike | None = None, *, what: str = "spec") -> Callable:
    """The callable a spec names (see the module docstring); raises :class:`CallableSpecError` naming the problem.

    ``what`` starts every error message: ``"reward function spec"`` (:mod:`reasonrl.rewards.user_fn`), ``"tool
    spec"`` and ``"env_fn"`` (the tool and environment loaders of :mod:`reasonrl.agents`)."""
    if not isinstance(spec, str) or ":" not in spec:
        raise CallableSpecError(
            f"{what} {spec!r} has no ':'; expected 'path/to/file.py:function' or 'package.module:function'"
        )
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise CallableSpecError(f"{what} {spec!r}: both the module/file and the function name are needed")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise CallableSpecError(f"{what} {spec!r}: {attr!r} is not a valid (dotted) Python name")
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    module = _load_module_from_file(spec, target, base_dir, what) if is_file else _import_module(spec, target, what)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            available = sorted(  # classes only when defined there (not every class the file imports)
                k
                for k, v in vars(module).items()
                if callable(v)
                and not k.startswith("_")
                and (not isinstance(v, type) or getattr(v, "__module__", None) == module.__name__)
            )
            raise CallableSpecError(
                f"{what} {spec!r}: {target!r} has no attribute {attr!r}; callables defined there: {available}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise CallableSpecError(f"{what} {spec!r}: {attr!r} is not callable (it is of type {type(obj).__name__})")
    return obj

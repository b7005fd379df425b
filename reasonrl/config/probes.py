"""What the local machine has: model folders and their context length (:mod:`reasonrl.config.model_paths`,
re-exported here under the names validation uses), reward_fn files or modules, usable experiment folders, and the
number of visible GPUs. Standard library only (torch imported lazily to count GPUs, and only when a GPU driver is
present)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Re-exported under the names validation (validate, consistency, reasonrl.sft.config) imports from here.
from reasonrl.config.model_paths import HOW_TO_PROVIDE_MODEL as _HOW_TO_PROVIDE_MODEL  # noqa: F401
from reasonrl.config.model_paths import model_max_positions as _model_max_positions  # noqa: F401
from reasonrl.config.model_paths import model_problems as _model_problems  # noqa: F401


def _reward_fn_problems(spec: str) -> list[str]:
    import importlib.util

    fix = "use reward_fn=path/to/file.py:function or reward_fn=package.module:function, or none for the math reward"
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        return [f"reward_fn={spec!r} needs the form file.py:function or package.module:function: {fix}"]
    if not all(part.isidentifier() for part in attr.split(".")):
        return [f"reward_fn={spec!r}: {attr!r} is not a Python name: {fix}"]
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = Path(target).expanduser()
        if not path.is_file():
            return [f"reward_fn={spec!r}: file {str(path)!r} does not exist (current directory {os.getcwd()}): {fix}"]
        return []
    top = target.split(".")[0]
    try:
        found = top.isidentifier() and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return [f"reward_fn={spec!r}: module {top!r} is not importable from here: {fix}"]
    return []


_ENV_FORMS = "env_fn takes 'tools' (the built-in tool environment), 'path/to/file.py:Name' or 'package.module:Name'"
_ENV_NEEDS = (
    "an environment needs reset(self, row) -> str | None and step(self, model_turn) -> StepResult (docs/multi_turn.md)"
)


def _env_fn_problems(spec: str) -> list[str]:
    """What can be told of ``env_fn=spec`` without importing anything (the file is read with ``ast``): the spec's
    form, the file or module exists, the file compiles, it defines the name, and a class defined there (with its
    bases in the same file) has ``reset`` and ``step``. What needs the import (a factory's result, a class with a
    base from elsewhere) is checked before Ray starts by ``reasonrl.agents.loading.env_fn_problems``."""
    spec = spec.strip()
    if spec == "tools":
        return []
    problems, defs, attr = _spec_source_problems("env_fn", spec, _ENV_FORMS, "a class or factory")
    if problems or defs is None:
        return problems
    name = attr.split(".")[0]
    attributes = defs.class_attributes(name) if name == attr else None
    if attributes is not None:
        missing = [m for m in ("reset", "step") if m not in attributes]
        if missing:
            return [f"env_fn={spec!r}: the class {name} has no callable {' or '.join(missing)}; {_ENV_NEEDS}"]
    return []


_AGENT_FORMS = "agent_fn takes 'path/to/file.py:function' or 'package.module:function', a function run(row, endpoint)"


def _agent_fn_problems(spec: str) -> list[str]:
    """What can be told of ``agent_fn=spec`` without importing anything: the spec's form, the file or module exists,
    the file compiles and defines the name, and that name is not a class of the file (an agent is a function
    ``run(row, endpoint)``). The import and the signature are checked before Ray starts by
    ``reasonrl.agents.agent_fn.agent_fn_problems``."""
    spec = spec.strip()
    problems, defs, attr = _spec_source_problems("agent_fn", spec, _AGENT_FORMS, "a function")
    if problems or defs is None:
        return problems
    if attr in defs.classes:
        return [
            f"agent_fn={spec!r}: {attr} is a class; agent_fn must name a function run(row, endpoint) (one call per "
            "sample, docs/agents.md); write a function that builds and runs your agent"
        ]
    return []


def _spec_source_problems(field: str, spec: str, forms: str, kind: str):
    """``(problems, definitions or None, the name after ':')`` of a ``file.py:Name`` / ``module:Name`` spec of
    ``field``, read with ``ast``: its form, the file or module exists, it compiles and defines the name. The
    definitions are None when they cannot be read without importing (or when there are problems)."""
    import difflib

    from reasonrl.utils.pysource import module_source, read_definitions

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        return [f"{field}={spec!r} is not a spec: {forms}"], None, attr
    if not all(part.isidentifier() for part in attr.split(".")):
        return [f"{field}={spec!r}: {attr!r} is not a Python name: {forms}"], None, attr
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = Path(target).expanduser()
        if not path.is_file():
            return (
                [
                    f"{field}={spec!r}: file {str(path)!r} does not exist (current directory {os.getcwd()}): fix the "
                    f"path (relative paths start at the directory you run from); {forms}"
                ],
                None,
                attr,
            )
        if path.suffix != ".py":
            return [f"{field}={spec!r}: {str(path)!r} is not a .py file; {forms}"], None, attr
        where = repr(str(path))
    else:
        found, path = module_source(target)
        if not found:
            return (
                [
                    f"{field}={spec!r}: module {target.split('.')[0]!r} is not importable from here: use "
                    "'package.module:Name' for an importable module or 'path/to/file.py:Name' for a file"
                ],
                None,
                attr,
            )
        if path is None:  # compiled, namespace or found by a custom finder: checked when it is imported
            return [], None, attr
        where = f"module {target!r} ({path})"
    try:
        defs = read_definitions(path)
    except SyntaxError as exc:
        return (
            [
                f"{field}={spec!r}: {where} does not compile (SyntaxError: {exc.msg}, line {exc.lineno}): fix the "
                "error in that file (it is imported before the run starts)"
            ],
            None,
            attr,
        )
    except (OSError, ValueError) as exc:  # unreadable, not UTF-8 without a coding line, null bytes
        return [f"{field}={spec!r}: {where} cannot be read as Python ({type(exc).__name__}: {exc})"], None, attr
    name = attr.split(".")[0]
    if defs.defines(name) is False:
        listing = defs.listing()
        close = difflib.get_close_matches(name, listing, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        defined = f"classes and functions defined there: {listing}" if listing else "it defines no class or function"
        return (
            [
                f"{field}={spec!r}: {where} defines no {name!r}; {hint}{defined}; the part after ':' must name "
                f"{kind} defined there"
            ],
            None,
            attr,
        )
    return [], defs, attr


def _folder_problems(name: str, value: str, exp_name: str) -> list[str]:
    """``ckpt_dir`` / ``log_dir`` (``name``) = ``value``: the run creates ``value/exp_name/``, which cannot work when
    ``value`` or ``value/exp_name`` is a file, a parent of ``value`` is a file, or the folder it writes into first
    (the nearest existing one) is not writable."""
    root = Path(value).expanduser()
    target = root / exp_name
    fix = f"give {name} a folder the run can create {target}/ in"
    for path in (root, target):
        if path.exists() and not path.is_dir():
            return [f"{name}={value!r}: {path} is a file, not a folder: {fix}"]
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"{name}={value!r}: {existing} is a file, so {root} cannot be created inside it: {fix}"]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [
            f"{name}={value!r}: {existing.resolve()} is not writable by this user, so {target} cannot be created: {fix}"
        ]
    return []


def _no_gpu_driver() -> bool:
    """True when this machine certainly has no usable GPU, told without importing torch (which takes seconds):
    ``CUDA_VISIBLE_DEVICES`` hides every device, or (Linux) there is no NVIDIA driver, no ROCm device and no WSL GPU
    bridge. False means: ask torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return True
    if not os.path.isdir("/proc") or not os.path.isdir("/dev"):  # not Linux: torch decides
        return False
    markers = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
    return not any(os.path.exists(path) for path in markers)


def _local_gpu_count() -> int:
    """CUDA devices visible to this process: 0 at once without a GPU driver (:func:`_no_gpu_driver`), else
    ``torch.cuda.device_count()`` (torch imported lazily; 0 without torch)."""
    if _no_gpu_driver():
        return 0
    try:
        import torch
    except ImportError:
        return 0
    try:
        return int(torch.cuda.device_count())
    except Exception:  # a broken driver counts as no GPU; Ray will say the same
        return 0


def _gpu_count() -> int:
    """``reasonrl.config._local_gpu_count()``, looked up on the package at each call so that patching it there
    (as tests do, to pretend a GPU count) reaches every caller. The package is read from ``sys.modules`` (it is
    loaded before any of its modules), not imported: this module sits below the package's ``__init__``."""
    return sys.modules[__package__]._local_gpu_count()

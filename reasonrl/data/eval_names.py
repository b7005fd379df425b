"""Unique, readable names of evaluation sets, used in metric keys (``eval/<name>/avg@1``) and logs.

    eval_set_names(["math500_test", "a/test.jsonl", "b/test.jsonl", "data/snap@test"])
    # -> ["math500_test", "a_test", "b_test", "snap_test"]

* a built-in name is kept as is;
* a file is named by its stem, a folder by its name, with ``_<split>`` appended for ``@<split>``;
* when names collide, the colliding paths take parent folder names (``a_test``, ``b_test``) until they differ;
  paths that differ only in their file type get it appended (``math_jsonl``, ``math_parquet``), and a name still
  taken gets ``_2``, ``_3``, ... (in order);
* characters other than letters, digits, ``_ . -`` become ``_``: no ``/``, so a name is one metric-key segment
  and a valid file name.

The same source listed twice (``a/test.jsonl`` and ``./a/test.jsonl``) is an error: :func:`duplicate_sources`
finds it (config validation reports it before anything starts).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from reasonrl.data.sources import DATA_SUFFIXES, builtin_names, parse_source

_UNSAFE = re.compile(r"[^\w.-]+")


@dataclass
class _Named:
    """One eval source: its fixed name (built-in) or its path tokens, innermost first."""

    fixed: str | None
    tokens: tuple[str, ...] = ()  # leaf (with split) then parent folders, innermost first
    suffix: str = ""  # file type ("jsonl"), "" for folders
    depth: int = 1

    def name(self) -> str:
        return self.fixed if self.fixed is not None else "_".join(reversed(self.tokens[: self.depth]))


def _key(source: str, builtins: set[str]) -> tuple[str, ...]:
    """What a source points at: a built-in name, or (absolute path, split)."""
    path_text, split = parse_source(source)
    if path_text in builtins and split is None:
        return ("builtin", path_text)
    return ("path", os.path.abspath(os.path.expanduser(path_text)), split or "")


def duplicate_sources(sources: Sequence[str]) -> list[str]:
    """Sources that point at the same data as an earlier one (same built-in name, or same path and split)."""
    builtins, seen, dups = set(builtin_names()), set(), []
    for source in sources:
        key = _key(source, builtins)
        if key in seen:
            dups.append(source)
        seen.add(key)
    return dups


def _entry(source: str, builtins: set[str]) -> _Named:
    path_text, split = parse_source(source)
    if path_text in builtins and split is None:
        return _Named(fixed=source)
    path = Path(os.path.abspath(os.path.expanduser(path_text)))
    is_data_file = path.suffix in DATA_SUFFIXES
    leaf = (path.stem if is_data_file else path.name) + (f"_{split}" if split else "")
    parents = [p.name for p in path.parents if p.name]
    tokens = tuple(_UNSAFE.sub("_", t) or "_" for t in (leaf, *parents))
    return _Named(fixed=None, tokens=tokens, suffix=path.suffix[1:] if is_data_file else "")


def _collisions(entries: list[_Named]) -> list[list[int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, entry in enumerate(entries):
        groups[entry.name()].append(i)
    return [group for group in groups.values() if len(group) > 1]


def _grow(entries: list[_Named]) -> bool:
    """Add one parent folder to each path of every collision group where that can separate names; whether any
    name changed."""
    grew = False
    for group in _collisions(entries):
        paths = [i for i in group if entries[i].fixed is None]
        has_builtin = len(paths) < len(group)
        outer = {entries[i].tokens[entries[i].depth :] for i in paths}
        if not has_builtin and len(outer) < 2:  # identical parent folders: more of them cannot help
            continue
        for i in paths:
            if entries[i].depth < len(entries[i].tokens):
                entries[i].depth += 1
                grew = True
    return grew


def eval_set_names(sources: Sequence[str]) -> list[str]:
    """One unique name per source, in order (see the module docstring); ``ValueError`` on a duplicate source."""
    dups = duplicate_sources(sources)
    if dups:
        raise ValueError(f"eval_data lists the same source twice: {', '.join(map(repr, dups))}; remove the duplicate")
    builtins = set(builtin_names())
    entries = [_entry(os.fspath(s), builtins) for s in sources]
    while _grow(entries):
        pass
    names = [entry.name() for entry in entries]
    for group in _collisions(entries):
        for i in group:
            if entries[i].suffix:
                names[i] += f"_{entries[i].suffix}"
    taken: set[str] = set()
    for i, name in enumerate(names):
        unique, n = name, 1
        while unique in taken:
            n += 1
            unique = f"{name}_{n}"
        names[i] = unique
        taken.add(unique)
    return names

"""The wording shared by config and data problems: a "did you mean" hint and the problem of an empty list item.

Standard library only, so that ``config/`` and ``data/`` both build on it without importing each other.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any


def close_hint(value: Any, candidates: Sequence[Any], n: int = 2) -> str:
    """``" (did you mean 'a' or 'b'?)"`` for the close matches of ``value`` among ``candidates``; ``""`` if none."""
    if not isinstance(value, str):
        return ""
    matches = difflib.get_close_matches(value, [str(c) for c in candidates], n=n, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(m) for m in matches)}?)" if matches else ""


def empty_item_problem(name: str, values: Sequence[str], index: int, why: str = "") -> str:
    """The problem of ``values[index]`` (of list field ``name``) being empty; ``why`` says what it would do."""
    return (
        f"{name}: item {index + 1} of {len(values)} is empty ({list(values)!r}){why}; a trailing or doubled comma "
        f"on the command line makes one: remove it (for no items at all write {name}=)"
    )

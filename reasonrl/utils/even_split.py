"""The one even split of the code base: ``n`` items into ``parts`` contiguous, nearly equal parts.

Prompts over vLLM engines, samples over a role's ranks, a rollout over its ``*_update_steps`` mini-batches: part
``i`` holds items ``bounds[i]:bounds[i + 1]`` with ``bounds[i] = round(i * n / parts)``. Standard library only, so
that ``config/`` can build on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def even_bounds(n: int, parts: int) -> list[int]:
    """``parts + 1`` boundaries cutting ``n`` items into ``parts`` contiguous parts whose sizes differ by at most
    one (``round(i * n / parts)``); with fewer items than parts some parts are empty."""
    return [round(i * n / parts) for i in range(parts + 1)]


def even_parts(items: Sequence[T], parts: int) -> list[list[T]]:
    """``items`` cut at :func:`even_bounds`: ``parts`` contiguous, nearly equal lists (some empty when
    ``len(items) < parts``)."""
    bounds = even_bounds(len(items), parts)
    return [list(items[bounds[i] : bounds[i + 1]]) for i in range(parts)]

"""``ConfigError`` (every problem of a config at once) and the "did you mean" hint of its messages."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` lists every problem found, each naming the field(s) and the fix."""

    def __init__(self, problems: Sequence[str] | str, title: str = "invalid config"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        n = len(self.problems)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title}: {n} problem{'s' if n != 1 else ''}:\n{body}")


def _close(value: Any, candidates: Sequence[Any], n: int = 2) -> str:
    if not isinstance(value, str):
        return ""
    matches = difflib.get_close_matches(value, [str(c) for c in candidates], n=n, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(m) for m in matches)}?)" if matches else ""

"""``ConfigError`` (every problem of a config at once) and the "did you mean" hint of its messages."""

from __future__ import annotations

from collections.abc import Sequence

from reasonrl.utils.hints import close_hint


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` lists every problem found, each naming the field(s) and the fix."""

    def __init__(self, problems: Sequence[str] | str, title: str = "invalid config"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        n = len(self.problems)
        body = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{title}: {n} problem{'s' if n != 1 else ''}:\n{body}")


_close = close_hint  # the "did you mean" hint of every config message (reasonrl.utils.hints: data/ shares it)

"""The checks two HTTP clients of a run share (``reward_url*``: remote rewards; ``judge_url*``: an LLM judge behind an
OpenAI-compatible endpoint): their numbers, the URL and the variable holding the secret. Each message names the
field and what to do. Standard library only; the secret's value is never shown."""

from __future__ import annotations

import math
from collections.abc import Mapping
from urllib.parse import urlsplit


def client_number_problems(cfg, prefix: str, counts: tuple[str, ...] = ()) -> list[str]:
    """``<prefix>_concurrency`` and the ``counts`` fields >= 1, ``<prefix>_retries`` >= 0, ``<prefix>_timeout_s`` > 0
    and, where the config has it, ``<prefix>_backoff_s`` >= 0 (finite seconds)."""
    problems = []
    for name in (f"{prefix}_concurrency", *counts):
        if getattr(cfg, name) < 1:
            problems.append(f"{name}={getattr(cfg, name)!r}: must be >= 1")
    retries = getattr(cfg, f"{prefix}_retries")
    if not retries >= 0:
        problems.append(f"{prefix}_retries={retries!r}: must be >= 0 (0 = no retry)")
    timeout = getattr(cfg, f"{prefix}_timeout_s")
    if not (timeout > 0 and math.isfinite(timeout)):
        problems.append(f"{prefix}_timeout_s={timeout!r}: must be > 0 seconds")
    backoff = getattr(cfg, f"{prefix}_backoff_s", None)
    if backoff is not None and not (backoff >= 0 and math.isfinite(backoff)):
        problems.append(f"{prefix}_backoff_s={backoff!r}: must be >= 0 seconds")
    return problems


def url_problems(field: str, url: str, example: str) -> list[str]:
    """``url`` must be ``http(s)://host[:port]/path``; ``example`` ends each message (what a good value looks like)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        return [f"{field}={url!r} is not a URL ({exc}): {example}"]
    if parts.scheme not in ("http", "https"):
        return [f"{field}={url!r}: the scheme must be http or https, not {parts.scheme or 'none'!r}: {example}"]
    if not parts.hostname:
        return [f"{field}={url!r} names no host: {example}"]
    return []


def secret_env_problems(field: str, env: str | None, environ: Mapping[str, str], what: str, unset: str) -> list[str]:
    """``field`` names an environment variable holding the secret (``what``: "secret", "key"): it must be set and
    non-empty (the value is never a config field: configs are logged). ``unset``: what none means."""
    if env is None:
        return []
    if not env.strip():
        return [f"{field} is empty: name an environment variable, or none for {unset}"]
    if not environ.get(env):
        return [
            f"{field}={env!r}: that environment variable is unset or empty; export the {what} as {env} (never as a "
            f"config field: configs are logged), or set {field}=none"
        ]
    return []

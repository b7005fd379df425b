"""Refusals of the ``reward_url*`` fields (remote rewards, docs/model_rewards.md), before anything starts: each
message names the field and what to do. Standard library only; the environment is read for the secret's variable
(its value is never shown)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from urllib.parse import urlsplit


def reward_url_problems(cfg, environ: Mapping[str, str] | None = None) -> list[str]:
    """Problems of the ``reward_url*`` fields: a URL that is not ``http(s)://host[:port]/path``, ``reward_fn``
    set too (which one scores rows without ``data_source`` would be a guess), a secret variable that is unset,
    numbers out of range. The numbers are checked even without ``reward_url`` (a typo stays a typo)."""
    environ = os.environ if environ is None else environ
    problems = []
    for name in ("reward_url_batch_size", "reward_url_concurrency"):
        if getattr(cfg, name) < 1:
            problems.append(f"{name}={getattr(cfg, name)!r}: must be >= 1")
    if not cfg.reward_url_retries >= 0:
        problems.append(f"reward_url_retries={cfg.reward_url_retries!r}: must be >= 0 (0 = no retry)")
    if not (cfg.reward_url_timeout_s > 0 and math.isfinite(cfg.reward_url_timeout_s)):
        problems.append(f"reward_url_timeout_s={cfg.reward_url_timeout_s!r}: must be > 0 seconds")
    if not (cfg.reward_url_backoff_s >= 0 and math.isfinite(cfg.reward_url_backoff_s)):
        problems.append(f"reward_url_backoff_s={cfg.reward_url_backoff_s!r}: must be >= 0 seconds")
    failure = cfg.reward_url_failure_reward
    if failure is not None and not math.isfinite(failure):
        problems.append(f"reward_url_failure_reward={failure!r}: must be a finite number (or none: wrong_reward)")
    url = cfg.reward_url
    if url is None:
        return problems
    example = "e.g. reward_url=http://127.0.0.1:8123/v1/score (python -m reasonrl.reward_server prints it)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        return problems + [f"reward_url={url!r} is not a URL ({exc}): {example}"]
    if parts.scheme not in ("http", "https"):
        problems.append(
            f"reward_url={url!r}: the scheme must be http or https, not {parts.scheme or 'none'!r}: {example}"
        )
    elif not parts.hostname:
        problems.append(f"reward_url={url!r} names no host: {example}")
    if cfg.reward_fn:
        problems.append(
            f"reward_url and reward_fn={cfg.reward_fn!r} are both set: rows without data_source would go to one of "
            "them by a guess; set one (your function can be served: python -m reasonrl.reward_server --reward "
            f"{cfg.reward_fn})"
        )
    env = cfg.reward_url_secret_env
    if env is not None:
        if not env.strip():
            problems.append("reward_url_secret_env is empty: name an environment variable, or none for no secret")
        elif not environ.get(env):
            problems.append(
                f"reward_url_secret_env={env!r}: that environment variable is unset or empty; export the service's "
                f"secret as {env} (never as a config field: configs are logged), or set reward_url_secret_env=none "
                "for a service without authentication"
            )
    return problems

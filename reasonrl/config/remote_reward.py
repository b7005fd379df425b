"""Refusals of the ``reward_url*`` fields (remote rewards, docs/model_rewards.md), before anything starts: each
message names the field and what to do. Standard library only; the environment is read for the secret's variable
(its value is never shown)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from reasonrl.config.http_fields import client_number_problems, secret_env_problems, url_problems


def reward_url_problems(cfg, environ: Mapping[str, str] | None = None) -> list[str]:
    """Problems of the ``reward_url*`` fields: a URL that is not ``http(s)://host[:port]/path``, ``reward_fn``
    set too (which one scores rows without ``data_source`` would be a guess), a secret variable that is unset,
    numbers out of range. The numbers are checked even without ``reward_url`` (a typo stays a typo)."""
    environ = os.environ if environ is None else environ
    problems = client_number_problems(cfg, "reward_url", counts=("reward_url_batch_size",))
    failure = cfg.reward_url_failure_reward
    if failure is not None and not math.isfinite(failure):
        problems.append(f"reward_url_failure_reward={failure!r}: must be a finite number (or none: wrong_reward)")
    url = cfg.reward_url
    if url is None:
        return problems
    example = "e.g. reward_url=http://127.0.0.1:8123/v1/score (python -m reasonrl.reward_server prints it)"
    problems += url_problems("reward_url", url, example)
    if cfg.reward_fn:
        problems.append(
            f"reward_url and reward_fn={cfg.reward_fn!r} are both set: rows without data_source would go to one of "
            "them by a guess; set one (your function can be served: python -m reasonrl.reward_server --reward "
            f"{cfg.reward_fn})"
        )
    what, unset = "service's secret", "a service without authentication"
    return problems + secret_env_problems("reward_url_secret_env", cfg.reward_url_secret_env, environ, what, unset)

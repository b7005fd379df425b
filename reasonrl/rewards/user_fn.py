"""User reward functions loaded from a spec string: ``path/to/file.py:fn`` or ``package.module:fn``.

Two signatures are supported::

    def my_reward(response: str, gold: str, **meta) -> float: ...            # per sample (the default)

    @batched_reward                                                          # or: my_batch.batched = True
    def my_batch(responses: list[str], golds: list[str], **meta) -> list[float]: ...

``meta`` holds the extra per-sample fields the caller passes (e.g. ``finish_reason``, ``prompt``, row fields);
only the keywords a function accepts are passed, unless it takes ``**kwargs``.

Failure policy: an exception (or a non-numeric / NaN / wrong-length return value) inside a user function is
counted, logged with its traceback (first ``max_logged_errors`` times, then a count every 100), and scores the
sample 0; it never stops the batch. When a batched function raises, it is retried one sample at a time so that
only the failing samples get 0. User functions run in the calling process, without a timeout.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from loguru import logger

from reasonrl.utils.callables import CallableSpecError, resolve_callable

_WHAT = "reward function spec"  # how errors name the spec; other loaders (tools, environments) pass their own

RewardFnSpecError = CallableSpecError
"""The spec string does not name a loadable callable (:func:`reasonrl.utils.callables.resolve_callable`)."""


def batched_reward(fn: Callable) -> Callable:
    """Decorator: mark ``fn(responses, golds, **meta) -> list[float]`` as a batch reward function."""
    fn.batched = True  # type: ignore[attr-defined]
    return fn


def _accepted_keywords(fn: Callable) -> set[str] | None:
    """Names of the keyword arguments ``fn`` accepts beyond the first two, or None if it takes ``**kwargs``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params[2:] if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


class UserRewardFn:
    """A loaded user reward function with the failure policy of the module docstring.

    Call it as ``fn(responses, golds, **meta) -> list[float]`` whatever its own signature is; ``meta`` values are
    lists (one entry per sample) or scalars (shared by all samples). ``num_calls``/``num_errors`` count samples.
    """

    def __init__(self, fn: Callable, spec: str = "<callable>", batched: bool | None = None, max_logged_errors: int = 5):
        self.fn = fn
        self.spec = spec
        self.batched = bool(getattr(fn, "batched", False)) if batched is None else batched
        self.max_logged_errors = max_logged_errors
        self.num_calls = 0
        self.num_errors = 0
        self._keywords = _accepted_keywords(fn)

    def _meta_for(self, meta: dict[str, Any], n: int, i: int | None) -> dict[str, Any]:
        out = {}
        for k, v in meta.items():
            if self._keywords is not None and k not in self._keywords:
                continue
            per_sample = isinstance(v, (list, tuple)) and len(v) == n
            if i is None:
                out[k] = v
            else:
                out[k] = v[i] if per_sample else v
        return out

    def _record_error(self, what: str, exc: BaseException | None = None) -> None:
        self.num_errors += 1
        if self.num_errors <= self.max_logged_errors:
            log = logger.opt(exception=exc) if exc is not None else logger
            log.warning(f"user reward function {self.spec!r}: {what}; the sample scores 0")
        elif self.num_errors % 100 == 0:
            logger.warning(f"user reward function {self.spec!r}: {self.num_errors} errors so far (samples scored 0)")

    def _as_score(self, value: Any) -> float:
        try:
            score = float(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"returned {type(value).__name__} {str(value)[:50]!r}, not a number") from exc
        if not math.isfinite(score):
            raise ValueError(f"returned non-finite {score}")
        return score

    def _one(self, response: str, gold: str, meta: dict[str, Any]) -> float:
        try:
            if self.batched:
                values = self.fn([response], [gold], **{k: [v] for k, v in meta.items()})
                if len(values) != 1:
                    raise ValueError(f"returned {len(values)} scores for 1 sample")
                return self._as_score(values[0])
            return self._as_score(self.fn(response, gold, **meta))
        except Exception as exc:  # noqa: BLE001 - user code: count, log, score 0
            self._record_error(f"raised {type(exc).__name__}: {exc}", exc)
            return 0.0

    def __call__(self, responses: Sequence[str], golds: Sequence[str], **meta: Any) -> list[float]:
        n = len(responses)
        if len(golds) != n:
            raise ValueError(f"{n} responses but {len(golds)} golds")
        self.num_calls += n
        if self.batched:
            try:
                values = self.fn(list(responses), list(golds), **self._meta_for(meta, n, None))
                if len(values) != n:
                    raise ValueError(f"returned {len(values)} scores for {n} samples")
                return [self._as_score(v) for v in values]
            except Exception as exc:  # noqa: BLE001 - retry per sample so only the failing ones score 0
                logger.warning(
                    f"user reward function {self.spec!r} failed on a batch of {n} "
                    f"({type(exc).__name__}: {exc}); retrying one sample at a time"
                )
        return [self._one(responses[i], golds[i], self._meta_for(meta, n, i)) for i in range(n)]


def load_reward_fn(
    spec: str, *, batched: bool | None = None, base_dir: str | os.PathLike | None = None
) -> UserRewardFn:
    """Load ``path/to/file.py:fn`` or ``package.module:fn`` as a ``UserRewardFn``.

    ``batched`` overrides the function's own ``batched`` attribute; relative file paths are resolved against
    ``base_dir`` (default: the current directory). Raises ``RewardFnSpecError`` naming the spec and the problem
    (no colon, file missing, module not found, import failure, attribute missing, not callable).
    """
    return UserRewardFn(resolve_callable(spec, base_dir, what=_WHAT), spec, batched)

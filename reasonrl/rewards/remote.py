"""Remote rewards: a user's reward service over HTTP (``reward_url=``), as the scorer of rows routed ``remote``.

:class:`RemoteScorer` sends a batch as requests of at most ``batch_size`` items (the protocol of
:mod:`reasonrl.rewards.remote_protocol`, written down in docs/model_rewards.md), at most ``concurrency`` in flight,
each under a deadline of ``timeout_s`` seconds for the whole exchange (connect, send, wait, read). A request is
retried ``retries`` times, after ``backoff_s * 2**k`` seconds times a jitter in [0.5, 1), on a connection error,
a timeout, a 5xx or 429 status, and a response that is not JSON or breaks the protocol (wrong length, a reward that
is not a finite number...). A 4xx other than 429 is not retried: the service refused the request, its message is
logged. When a request has failed for good its samples get ``failure_reward`` (the config's ``wrong_reward`` unless
``reward_url_failure_reward`` is set), ``reason`` ``remote_failed``, and are counted: never a silent zero.

Every result carries its request's :class:`RemoteOutcome` (``RewardResult.remote``), which the step's metrics read
(:func:`remote_metrics`: ``reward/remote_failed``, ``reward/remote_retries``, ``reward/remote_seconds``), as the
code rows' verdicts reach ``reward/code_*``. The secret is read from the environment variable the config names
(``reward_url_secret_env``), never from a config field: configs are logged and saved with checkpoints.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loguru import logger

from reasonrl.rewards.remote_protocol import (
    PROTOCOL_VERSION,
    ProtocolError,
    RemoteResult,
    batches,
    error_message,
    item_payload,
    parse_response,
)
from reasonrl.rewards.shaping import RewardResult

if TYPE_CHECKING:
    from reasonrl.dataplane.completion import Completion

FAILED_REASON = "remote_failed"


@dataclass(frozen=True)
class RemoteSettings:
    """The client's settings (the ``reward_url*`` config fields; :meth:`from_config`). ``secret`` is the value of
    the environment variable, or None for a service without authentication."""

    url: str
    batch_size: int = 64
    concurrency: int = 4
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    failure_reward: float = 0.0
    secret: str | None = None

    @classmethod
    def from_config(cls, cfg, environ: Mapping[str, str] | None = None) -> RemoteSettings:
        environ = os.environ if environ is None else environ
        env = cfg.reward_url_secret_env
        failure = cfg.reward_url_failure_reward
        return cls(
            url=cfg.reward_url,
            batch_size=cfg.reward_url_batch_size,
            concurrency=cfg.reward_url_concurrency,
            timeout_s=cfg.reward_url_timeout_s,
            retries=cfg.reward_url_retries,
            backoff_s=cfg.reward_url_backoff_s,
            failure_reward=cfg.wrong_reward if failure is None else failure,
            secret=environ.get(env) if env else None,
        )

    def __repr__(self) -> str:  # the secret never reaches a log line
        hidden = None if self.secret is None else "***"
        return (
            f"RemoteSettings(url={self.url!r}, batch_size={self.batch_size}, concurrency={self.concurrency}, "
            f"timeout_s={self.timeout_s}, retries={self.retries}, secret={hidden})"
        )


@dataclass(frozen=True)
class RemoteOutcome:
    """What happened to one request: its ``samples``, the ``retries`` it took, whether it ``failed`` for good, the
    ``seconds`` from its first try to its end (back-off included) and the last ``error`` (None when it succeeded
    at once). Every result of the request holds the same object."""

    samples: int
    retries: int
    failed: bool
    seconds: float
    error: str | None = None


class _Retryable(Exception):
    """A failure worth another try (connection, timeout, 5xx/429, garbage)."""


class _Refused(Exception):
    """A 4xx other than 429: the service refused the request; retrying would get the same answer."""


class RemoteScorer:
    """The scorer of the module docstring: ``scorer(completions, rows) -> list[RewardResult]``, then ``close()``.

    ``num_samples``, ``num_failed`` (samples scored ``failure_reward``) and ``num_retries`` count since the start.
    Calls may come from several threads; each call runs its own event loop (in a helper thread when the calling
    thread already runs one)."""

    def __init__(self, settings: RemoteSettings, max_logged_failures: int = 5):
        self.settings = settings
        self.max_logged_failures = max_logged_failures
        self.num_samples = self.num_failed = self.num_retries = self.num_failed_requests = 0
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg) -> RemoteScorer:
        return cls(RemoteSettings.from_config(cfg))

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions but {len(rows)} rows")
        if not completions:
            return []
        items = [item_payload(c, row) for c, row in zip(completions, rows, strict=True)]
        parts = batches(len(items), self.settings.batch_size)
        answers = _run(self._score_all(items, parts))
        results: list[RewardResult] = []
        for part, (scored, outcome) in zip(parts, answers, strict=True):
            self._count(outcome)
            for k, i in enumerate(part):
                c = completions[i]
                results.append(self._result(c, None if scored is None else scored[k], outcome))
        return results

    def _result(self, c, scored: RemoteResult | None, outcome: RemoteOutcome) -> RewardResult:
        stopped = c.finish_reason == "stop"
        if scored is None:
            return RewardResult(
                reward=self.settings.failure_reward,
                correct=False,
                reason=FAILED_REASON,
                finish_reason=c.finish_reason,
                truncated=not stopped,
                elapsed_s=outcome.seconds,
                remote=outcome,
            )
        reason, extracted = scored.info.get("reason"), scored.info.get("extracted")
        return RewardResult(
            reward=scored.reward,
            correct=scored.correct,
            reason=reason if isinstance(reason, str) else "remote",
            extracted=extracted if isinstance(extracted, str) else None,
            finish_reason=c.finish_reason,
            truncated=not stopped,
            elapsed_s=outcome.seconds,
            remote=outcome,
        )

    def _count(self, outcome: RemoteOutcome) -> None:
        with self._lock:
            self.num_samples += outcome.samples
            self.num_retries += outcome.retries
            if not outcome.failed:
                return
            self.num_failed += outcome.samples
            self.num_failed_requests += 1
            failures = self.num_failed_requests
        if failures <= self.max_logged_failures or failures % 100 == 0:
            logger.warning(
                f"reward_url {self.settings.url}: a request of {outcome.samples} samples failed after "
                f"{outcome.retries} retries ({outcome.error}); they score {self.settings.failure_reward} "
                f"(reward/remote_failed; {self.num_failed} samples failed so far)"
            )

    async def _score_all(self, items: list[dict], parts: Sequence[range]):
        import httpx

        s = self.settings
        headers = {"Authorization": f"Bearer {s.secret}"} if s.secret else {}
        limits = httpx.Limits(max_connections=s.concurrency, max_keepalive_connections=s.concurrency)
        gate = asyncio.Semaphore(s.concurrency)
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=s.timeout_s) as client:

            async def one(part: range):
                async with gate:
                    return await self._request(client, [items[i] for i in part])

            return await asyncio.gather(*(one(part) for part in parts))

    async def _request(self, client, items: list[dict]) -> tuple[list[RemoteResult] | None, RemoteOutcome]:
        s = self.settings
        start, error, tries = time.perf_counter(), None, 0
        body = {"version": PROTOCOL_VERSION, "items": items}
        while True:
            tries += 1
            try:
                scored = await asyncio.wait_for(self._post(client, body, len(items)), s.timeout_s)
                return scored, RemoteOutcome(len(items), tries - 1, False, time.perf_counter() - start, error)
            except TimeoutError:
                error = f"no answer within reward_url_timeout_s={s.timeout_s}"
            except _Retryable as exc:
                error = str(exc)
            except _Refused as exc:
                return None, RemoteOutcome(len(items), tries - 1, True, time.perf_counter() - start, str(exc))
            if tries > s.retries:
                return None, RemoteOutcome(len(items), tries - 1, True, time.perf_counter() - start, error)
            await asyncio.sleep(s.backoff_s * 2 ** (tries - 1) * random.uniform(0.5, 1.0))

    async def _post(self, client, body: dict, expected: int) -> list[RemoteResult]:
        import httpx

        try:
            response = await client.post(self.settings.url, json=body)
        except httpx.HTTPError as exc:  # connection refused or reset, the server died mid-answer, httpx's timeouts
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        try:
            data = response.json()
        except ValueError:
            data = None
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {error_message(data, response.text[:200])}")
        if status >= 400:
            raise _Refused(f"HTTP {status} (not retried): {error_message(data, response.text[:200])}")
        if data is None:
            raise _Retryable(f"HTTP {status} with a body that is not JSON: {response.text[:80]!r}")
        try:
            return parse_response(data, expected)
        except ProtocolError as exc:
            raise _Retryable(f"a response that breaks the protocol: {exc}") from None

    def wait_ready(self) -> None:
        """Probe the service before the run starts (``BasePPOExp`` calls it before Ray): a request of no items, with
        the retries of a scoring request, must come back as no results. Raises ``RuntimeError`` naming ``reward_url``
        and the last error (refused connection, 401 for a wrong secret, an answer that breaks the protocol), so that
        a run never starts to score every sample ``failure_reward``."""
        (scored, outcome), *_ = _run(self._score_all([], [range(0)]))
        if scored is None:
            raise RuntimeError(
                f"reward_url {self.settings.url}: the reward service does not answer as the protocol says "
                f"({outcome.error}); start it (python -m reasonrl.reward_server) or fix reward_url / its secret "
                "(docs/model_rewards.md)"
            )

    def close(self) -> None:
        """Nothing to release: each call opens and closes its own connections."""


def _run(coro):
    """``asyncio.run(coro)``, in a helper thread when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    out: dict[str, Any] = {}

    def target():
        try:
            out["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            out["error"] = exc

    thread = threading.Thread(target=target, name="remote-reward")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def remote_metrics(results: Sequence[Any]) -> dict[str, float]:
    """``reward/remote_*`` of a step's results (empty when none was scored remotely): ``failed``, samples scored
    ``failure_reward``; ``retries``, retries of the requests these samples travelled in (each request once);
    ``seconds``, the slowest of those requests, retries and back-off included."""
    outcomes = [r.remote for r in results if getattr(r, "remote", None) is not None]
    if not outcomes:
        return {}
    unique = list({id(o): o for o in outcomes}.values())
    return {
        "reward/remote_failed": float(sum(o.failed for o in outcomes)),
        "reward/remote_retries": float(sum(o.retries for o in unique)),
        "reward/remote_seconds": max(o.seconds for o in unique),
    }

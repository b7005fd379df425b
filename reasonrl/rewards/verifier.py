"""``RewardVerifier``: the batch API that checks thousands of (response, gold) pairs in parallel, each bounded
by a hard timeout.

    with RewardVerifier(num_workers=2, timeout_s=5.0) as verifier:
        results = verifier.verify_batch([(response, gold), ...])   # list[VerifyResult], same order
        results[0].correct, results[0].reason, results[0].extracted, results[0].elapsed_s

Identical (response, gold) pairs in a batch are verified once. Results carry ``reason`` in
``correct / wrong / no_answer / timeout / error``; a timeout or crash never raises and never stops the batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from loguru import logger

from reasonrl.rewards.pool import TaskOutcome, TimeoutPool
from reasonrl.rewards.verify import VerifyConfig, VerifyResult, verify_item, worker_init


class RewardVerifier:
    """A pool of verification workers (see ``pool.TimeoutPool``) plus the math verification task.

    Args:
        num_workers: worker processes (default: CPU count).
        timeout_s: hard wall-clock limit per pair; the worker is killed and replaced when it is exceeded.
        extract_mode: default answer extraction mode (``auto``, ``orz``, ``answer_tag``, ``boxed``, ``gsm8k``,
            ``answer_is``); ``config`` overrides every knob of ``VerifyConfig`` at once.
        memory_limit_mb: address-space limit per worker.
        chunk_size: pairs per IPC message (default adaptive).
        start_method: ``forkserver`` (default on Linux) or ``spawn``.
        batch_timeout_s: limit of one ``verify_batch`` call (None: none); past it the pairs not verified yet score
            ``timeout`` (error ``batch deadline``), counted in ``stats()["batch_deadline_items"]``.
    """

    def __init__(
        self,
        num_workers: int | None = None,
        timeout_s: float = 5.0,
        *,
        extract_mode: str = "auto",
        config: VerifyConfig | None = None,
        memory_limit_mb: int | None = 4096,
        chunk_size: int | None = None,
        start_method: str | None = None,
        batch_timeout_s: float | None = None,
    ):
        self.batch_timeout_s = batch_timeout_s
        self.config = config or VerifyConfig(extract_mode=extract_mode)
        self.pool = TimeoutPool(
            num_workers,
            timeout_s,
            initializer=worker_init,  # warm-up (instant when preloaded) + eval guard, before the worker is "ready"
            memory_limit_mb=memory_limit_mb,
            start_method=start_method,
            chunk_size=chunk_size,
        )

    @property
    def timeout_s(self) -> float:
        return self.pool.timeout_s

    @property
    def num_workers(self) -> int:
        return self.pool.num_workers

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until every worker is up (optional: ``verify_batch`` waits by itself)."""
        self.pool.wait_ready(timeout_s)

    def verify(self, response: str, gold: str, extract_mode: str | None = None) -> VerifyResult:
        """Verify a single pair (a batch of one)."""
        return self.verify_batch([(response, gold)], extract_mode=extract_mode)[0]

    def verify_batch(self, pairs: Sequence[tuple[str, str]], *, extract_mode: str | None = None) -> list[VerifyResult]:
        """Verify every ``(response, gold)`` pair; returns one ``VerifyResult`` per pair, in order.

        Non-string responses give ``reason="error"``; numeric golds are converted with ``str``.
        """
        config = self.config if extract_mode is None else dataclasses.replace(self.config, extract_mode=extract_mode)
        results: list[VerifyResult | None] = [None] * len(pairs)
        unique: dict[tuple[str, str], int] = {}
        tasks: list[tuple[str, str, VerifyConfig]] = []
        owners: list[list[int]] = []
        for i, pair in enumerate(pairs):
            response, gold = pair
            if isinstance(gold, (int, float)) and not isinstance(gold, bool):
                gold = str(gold)
            if not isinstance(response, str) or not isinstance(gold, str):
                results[i] = VerifyResult(
                    False, "error", None, 0.0, f"expected str, got {type(response).__name__}, {type(gold).__name__}"
                )
                continue
            key = (response, gold)
            if key not in unique:
                unique[key] = len(tasks)
                tasks.append((response, gold, config))
                owners.append([])
            owners[unique[key]].append(i)
        outcomes = self.pool.map(verify_item, tasks, deadline_s=self.batch_timeout_s)
        for outcome, idx in zip(outcomes, owners, strict=True):
            result = _to_result(outcome)
            for i in idx:
                results[i] = result
        bad = [r.reason for r in results if r is not None and r.reason in ("timeout", "error")]
        if bad:
            logger.warning(
                f"reward verification: {bad.count('timeout')} timeout(s), {bad.count('error')} error(s) "
                f"in a batch of {len(pairs)} (timeout {self.timeout_s:g}s)"
            )
        return results  # type: ignore[return-value]

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[TaskOutcome]:
        """Run another module-level scoring function on the same hard-timeout workers (e.g. gym scorers)."""
        return self.pool.map(fn, items)

    def stats(self) -> dict[str, int]:
        """Pool counters: items, timeouts, errors, crashes, restarts."""
        return dataclasses.asdict(self.pool.stats)

    def close(self) -> None:
        """Stop the workers; no process is left behind."""
        self.pool.close()

    def __enter__(self) -> RewardVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _to_result(outcome: TaskOutcome) -> VerifyResult:
    if outcome.status == "ok":
        return outcome.value
    return VerifyResult(False, outcome.status, None, outcome.elapsed_s, outcome.error)

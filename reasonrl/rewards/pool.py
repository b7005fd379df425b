"""A process pool with a hard per-item timeout: a worker stuck on one item is killed and replaced.

Why not ``concurrent.futures``/``multiprocessing.Pool``: neither can stop a running task. Here every worker is
a separate process (``forkserver`` start method where available, else ``spawn``; never ``fork``, so a parent
holding CUDA/Ray/threads is safe), and the parent enforces the deadline itself.

Scheduling (measured in ``benchmarks/bench_rewards.py``):

* Items are sent in chunks (one pipe message per chunk, so IPC does not dominate cheap items), and each worker
  gets its next chunk while still busy with the current one (pipelining; small chunks only, so a send never
  blocks the parent).
* The worker reports every item as soon as it is done, so the parent always knows which item is running and
  when it started. If it runs longer than ``timeout_s``, the worker gets SIGKILL, only that item is reported as
  ``timeout``, the chunk's unfinished items go back to the queue, and a fresh worker starts. A worker that dies
  on its own (segfault, OOM kill) is handled the same way with status ``error``.
* Each worker runs under an address-space limit (``memory_limit_mb``), so a memory bomb raises ``MemoryError``
  inside the worker instead of swapping the machine.

With the ``forkserver`` method, the modules in ``preload`` are imported once into the fork server, so a
replacement worker starts in tens of milliseconds instead of re-importing sympy.

Both start methods run the parent's main script again in every worker (see ``main_guard.py``): a worker that finds
the script unguarded exits at once, and the pool raises ``UnguardedMainError`` naming the script and the fix.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from loguru import logger

from reasonrl.rewards.main_guard import (
    EXIT_UNGUARDED_MAIN,
    UnguardedMainError,
    exit_if_reimporting_main,
    guard_advice,
    main_module,
)

_MAX_PIPELINED_BYTES = 32 * 1024  # only pre-send a chunk this small to a busy worker (fits the socket buffer)
_MAX_CHUNK_BYTES = 4 * 1024 * 1024
_PRELOADS: set[str] = set()
# The fork server is shared by every forkserver pool of a process, and only the first pool to start it decides what
# it imports; preloading the verifier there by default means replacement verification workers always start warm.
DEFAULT_PRELOAD = ("reasonrl.rewards._preload",)


@dataclass
class TaskOutcome:
    """Result of one item: ``status`` is ``ok`` (``value`` holds the return value), ``timeout`` or ``error``."""

    status: str
    value: Any = None
    error: str | None = None
    elapsed_s: float = 0.0


@dataclass
class PoolStats:
    """Counters over the pool's life: items finished, timeouts, errors, worker crashes and restarts."""

    items: int = 0
    timeouts: int = 0
    errors: int = 0
    crashes: int = 0
    restarts: int = 0
    batch_deadline_items: int = 0  # items scored ``timeout`` because their batch ran past ``map(deadline_s=...)``


def sleep_task(seconds: float) -> float:
    """A task that sleeps (used by tests and the benchmark to exercise timeouts)."""
    time.sleep(seconds)
    return seconds


def _worker_main(conn, initializer, initargs, memory_limit_mb) -> None:
    """Worker loop: receive ``(fn, items)`` chunks, send ``(status, value, error, elapsed)`` per item."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business; it kills us
    if memory_limit_mb:
        try:
            import resource

            limit = int(memory_limit_mb) * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
    if initializer is not None:
        initializer(*initargs)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        fn, items = msg
        for item in items:
            start = time.perf_counter()
            try:
                out = ("ok", fn(item), None)
            except BaseException as exc:  # noqa: BLE001 - MemoryError, RecursionError, user code: report, go on
                out = ("error", None, f"{type(exc).__name__}: {str(exc)[:300]}")
            elapsed = time.perf_counter() - start
            try:
                conn.send((*out, elapsed))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                conn.send(("error", None, f"result not picklable: {exc}", elapsed))


class _Worker:
    def __init__(self, ctx, initializer, initargs, memory_limit_mb):
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main, args=(child_conn, initializer, initargs, memory_limit_mb), daemon=True
        )
        self.proc.start()
        child_conn.close()
        self.conn = parent_conn
        self.ready = False
        self.started_at = time.monotonic()
        self.inflight: deque[int] = deque()  # item indices sent, in execution order
        self.item_started = 0.0  # when inflight[0] began running
        self.queued_bytes_ok = True  # may receive a pipelined chunk
        self.done = 0

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, AttributeError, ValueError):
            pass
        self.proc.join(timeout=5)
        self.conn.close()

    def stop(self, timeout: float = 2.0) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(timeout=timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        self.conn.close()


def default_start_method() -> str:
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


class TimeoutPool:
    """Worker processes that run ``fn(item)`` for each item with a hard per-item timeout.

    Args:
        num_workers: processes to run (default: CPU count).
        timeout_s: wall-clock limit per item; an item over it is reported as ``timeout`` and its worker killed.
        initializer, initargs: run once in every (re)started worker before it reports ready.
        memory_limit_mb: address-space limit per worker (``None``/0: unlimited).
        start_method: ``forkserver`` (default on Linux) or ``spawn``.
        preload: modules imported once by the fork server (only effective if it is not yet running; default: the
            math verifier, warmed up, so that (re)started verification workers are ready in milliseconds).
        chunk_size: items per message (default: adaptive, 1..32).
        max_tasks_per_worker: recycle a worker after this many items (bounds slow leaks; None: never).
        startup_timeout_s: a worker that is not ready after this long is an error.

    Use as a context manager or call ``close()``; an ``atexit`` hook closes forgotten pools.
    """

    def __init__(
        self,
        num_workers: int | None = None,
        timeout_s: float = 5.0,
        *,
        initializer: Callable | None = None,
        initargs: tuple = (),
        memory_limit_mb: int | None = 4096,
        start_method: str | None = None,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        chunk_size: int | None = None,
        max_tasks_per_worker: int | None = 20_000,
        startup_timeout_s: float = 120.0,
    ):
        exit_if_reimporting_main("TimeoutPool()")  # a worker re-running an unguarded script: say so, start nothing
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.num_workers = max(1, int(num_workers or os.cpu_count() or 1))
        self.timeout_s = float(timeout_s)
        self.chunk_size = chunk_size
        self.max_tasks_per_worker = max_tasks_per_worker
        self.startup_timeout_s = startup_timeout_s
        self.stats = PoolStats()
        self._init = (initializer, initargs, memory_limit_mb)
        method = start_method or default_start_method()
        self._ctx = mp.get_context(method)
        if method == "forkserver" and preload:
            _PRELOADS.update(preload)  # one fork server per process: keep every pool's wishes
            self._ctx.set_forkserver_preload(sorted(_PRELOADS))
        self._lock = threading.Lock()
        self._closed = False
        self._startup_failures = 0
        self._batch_end: float | None = None  # the running map's batch deadline (monotonic), if any
        self._workers = [self._spawn() for _ in range(self.num_workers)]
        _LIVE_POOLS.add(self)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, *self._init)

    def _replace(self, i: int, kill: bool = True) -> None:
        old = self._workers[i]
        if kill:
            old.kill()
        else:
            old.stop()
        self._workers[i] = self._spawn()
        self.stats.restarts += 1

    @property
    def pids(self) -> list[int]:
        """Process ids of the current workers."""
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        """Stop all workers (politely, then SIGKILL after 2 s). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for w in self._workers:
            w.stop()
        _LIVE_POOLS.discard(self)

    def __enter__(self) -> TimeoutPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until every worker has started (imports done); raises ``TimeoutError`` after ``timeout_s``."""
        deadline = time.monotonic() + (self.startup_timeout_s if timeout_s is None else timeout_s)
        with self._lock:
            while not all(w.ready for w in self._workers):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"reward workers not ready after {timeout_s}s")
                wait([w.conn for w in self._workers if not w.ready], timeout=left)
                for i, w in enumerate(self._workers):
                    if w.ready:
                        continue
                    dead = False
                    try:
                        while w.conn.poll():
                            if w.conn.recv()[0] == "ready":
                                w.ready = True
                                self._startup_failures = 0
                    except (EOFError, OSError):
                        dead = True  # handled outside the except, so a start-up error is not chained to EOFError
                    if dead:
                        self._handle_crash(i, [], deque())

    # -- work ------------------------------------------------------------------------------------------------
    def map(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        chunk_size: int | None = None,
        deadline_s: float | None = None,
    ) -> list[TaskOutcome]:
        """Run ``fn`` on every item; returns one ``TaskOutcome`` per item, in order. Never raises for item failures.

        ``fn`` must be picklable by reference (a module-level function) and items must be picklable.
        ``deadline_s``: a limit for the whole batch (seconds from now); past it, running items are killed and they
        and the items not yet run come back as ``timeout`` (error ``batch deadline``), counted in
        ``stats.batch_deadline_items``; the busy workers are replaced.
        """
        if self._closed:
            raise RuntimeError("TimeoutPool is closed")
        with self._lock:
            try:
                end = None if deadline_s is None else time.monotonic() + deadline_s
                return self._map(fn, list(items), chunk_size or self.chunk_size, end)
            except BaseException:  # e.g. KeyboardInterrupt: busy workers would later answer for stale items
                for i, w in enumerate(self._workers):
                    if w.inflight:
                        self._replace(i)
                raise

    def _map(self, fn, items: list, chunk_size: int | None, end: float | None = None) -> list[TaskOutcome]:
        n = len(items)
        results: list[TaskOutcome | None] = [None] * n
        if n == 0:
            return []
        cs = chunk_size or max(1, min(32, n // (self.num_workers * 4) or 1))
        pending: deque[int] = deque(range(n))
        remaining = n
        while remaining:
            now = time.monotonic()
            if end is not None and now >= end:
                return self._past_deadline(results, pending)
            for i, w in enumerate(self._workers):
                if not w.ready:
                    if now - w.started_at > self.startup_timeout_s:
                        raise RuntimeError(f"reward worker pid {w.proc.pid} not ready after {self.startup_timeout_s}s")
                    continue
                if pending and (not w.inflight or (w.queued_bytes_ok and len(w.inflight) <= cs)):
                    self._dispatch(i, fn, items, pending, cs)
            self._batch_end = end
            remaining -= self._collect(results, pending)
            remaining -= self._enforce_deadlines(results, pending)
        return results  # type: ignore[return-value]

    def _dispatch(self, i: int, fn, items: list, pending: deque, cs: int) -> None:
        w = self._workers[i]
        idx: list[int] = []
        while pending and len(idx) < cs:
            idx.append(pending.popleft())
        payload = pickle.dumps((fn, [items[j] for j in idx]), protocol=pickle.HIGHEST_PROTOCOL)
        busy = bool(w.inflight)
        if busy and len(payload) > _MAX_PIPELINED_BYTES:  # could block on a full socket: wait until idle
            pending.extendleft(reversed(idx))
            w.queued_bytes_ok = False
            return
        if len(payload) > _MAX_CHUNK_BYTES and len(idx) > 1:  # huge items: send fewer at a time
            pending.extendleft(reversed(idx[len(idx) // 2 :]))
            idx = idx[: len(idx) // 2]
            payload = pickle.dumps((fn, [items[j] for j in idx]), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            w.conn.send_bytes(payload)
        except (OSError, ValueError):  # worker died before reading; the sentinel check will replace it
            pending.extendleft(reversed(idx))
            return
        if not busy:
            w.item_started = time.monotonic()
        w.inflight.extend(idx)
        w.queued_bytes_ok = True

    def _next_deadline(self) -> float | None:
        deadlines = [w.item_started + self.timeout_s for w in self._workers if w.ready and w.inflight]
        deadlines += [w.started_at + self.startup_timeout_s for w in self._workers if not w.ready]
        return min(deadlines) if deadlines else None

    def _past_deadline(self, results: list, pending: deque) -> list[TaskOutcome]:
        """The batch deadline passed: everything unfinished is ``timeout``; busy workers are replaced."""
        for i, w in enumerate(self._workers):
            if w.inflight:
                pending.extend(w.inflight)
                w.inflight.clear()
                self._replace(i)
        for j, r in enumerate(results):
            if r is None:
                results[j] = TaskOutcome("timeout", None, "batch deadline")
                self.stats.items += 1
                self.stats.timeouts += 1
                self.stats.batch_deadline_items += 1
        pending.clear()
        return results

    def _collect(self, results: list, pending: deque) -> int:
        """Wait for messages or deaths until the next deadline; record finished items. Returns items finished."""
        deadline = self._next_deadline()
        end = self._batch_end
        if end is not None:
            deadline = end if deadline is None else min(deadline, end)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        handles = [w.conn for w in self._workers] + [w.proc.sentinel for w in self._workers]
        wait(handles, timeout=timeout)
        finished = 0
        for i, w in enumerate(self._workers):
            dead = False
            try:
                while w.conn.poll():
                    msg = w.conn.recv()
                    if msg[0] == "ready":
                        w.ready = True
                        self._startup_failures = 0
                        continue
                    status, value, error, elapsed = msg
                    j = w.inflight.popleft()
                    results[j] = TaskOutcome(status, value, error, elapsed)
                    self.stats.items += 1
                    self.stats.errors += status == "error"
                    finished += 1
                    w.done += 1
                    w.item_started = time.monotonic()
            except (EOFError, OSError):
                dead = True
            if dead or not w.proc.is_alive():
                finished += self._handle_crash(i, results, pending)
            elif not w.inflight and self.max_tasks_per_worker and w.done >= self.max_tasks_per_worker:
                self._replace(i, kill=False)
        return finished

    def _handle_crash(self, i: int, results: list, pending: deque) -> int:
        w = self._workers[i]
        w.proc.join(timeout=1)
        code = w.proc.exitcode
        finished = 0
        if w.inflight:
            j = w.inflight.popleft()
            elapsed = time.monotonic() - w.item_started
            results[j] = TaskOutcome("error", None, f"worker process died (exit code {code})", elapsed)
            self.stats.items += 1
            self.stats.errors += 1
            finished = 1
            pending.extendleft(reversed(w.inflight))
        self.stats.crashes += 1
        if not w.ready:
            _raise_for_startup_failure(code, self._startup_failures + 1)
            self._startup_failures += 1
        logger.warning(f"reward worker pid {w.proc.pid} died (exit code {code}); starting a new one")
        self._replace(i)
        return finished

    def _enforce_deadlines(self, results: list, pending: deque) -> int:
        finished = 0
        now = time.monotonic()
        for i, w in enumerate(self._workers):
            if not (w.ready and w.inflight) or now - w.item_started <= self.timeout_s:
                continue
            if w.conn.poll():  # the result arrived just now: take it in the next collect round
                continue
            j = w.inflight.popleft()
            results[j] = TaskOutcome("timeout", None, f"no result after {self.timeout_s:g}s", now - w.item_started)
            self.stats.items += 1
            self.stats.timeouts += 1
            finished += 1
            pending.extendleft(reversed(w.inflight))
            w.inflight.clear()
            self._replace(i)
        return finished


def _raise_for_startup_failure(code: int | None, failures: int) -> None:
    """A worker died before it was ready: raise at once if it re-ran an unguarded main module, else on the third
    failure in a row (with the likely causes)."""
    main = main_module()
    if code == EXIT_UNGUARDED_MAIN:
        raise UnguardedMainError(
            guard_advice(
                f"reward worker processes cannot start: they re-run the {main or 'main module'}, which starts "
                "work at import time"
            )
        )
    if failures >= 3:
        hint = (
            f', or does the {main} start work at import time with no `if __name__ == "__main__":` guard' if main else ""
        )
        raise RuntimeError(
            f"reward workers die during start-up (exit code {code}); is the initializer or preload broken{hint}? "
            "Their error is printed above."
        )


_LIVE_POOLS: weakref.WeakSet[TimeoutPool] = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()

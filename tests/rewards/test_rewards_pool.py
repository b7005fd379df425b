"""Hard-timeout worker pool: timeouts hit only the offending item, crashes are contained, adversarial inputs
return within the timeout, the pool stays healthy, and close() leaves no process behind."""

from __future__ import annotations

import os
import time

import pytest

from reasonrl.rewards import RewardVerifier, TimeoutPool, VerifyConfig
from reasonrl.rewards.pool import sleep_task


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc") else _kill0(pid)


def _kill0(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def small_pool():
    with TimeoutPool(num_workers=2, timeout_s=0.5) as pool:
        yield pool


def test_timeout_only_hits_the_slow_item(small_pool):
    before = small_pool.pids
    items = [0.01, 30.0, 0.01, 0.02, 30.0, 0.01, 0.01, 0.0]
    start = time.monotonic()
    out = small_pool.map(sleep_task, items, chunk_size=4)
    wall = time.monotonic() - start
    assert [o.status for o in out] == ["ok", "timeout", "ok", "ok", "timeout", "ok", "ok", "ok"]
    assert [o.value for o in out if o.status == "ok"] == [0.01, 0.01, 0.02, 0.01, 0.01, 0.0]
    assert all(0.5 <= o.elapsed_s < 1.5 for o in out if o.status == "timeout")
    assert wall < 4.0
    assert small_pool.stats.timeouts >= 2 and small_pool.stats.restarts >= 2
    assert set(small_pool.pids) != set(before)
    assert not any(_alive(pid) for pid in before if pid not in small_pool.pids)
    # healthy afterwards
    assert [o.status for o in small_pool.map(sleep_task, [0.0] * 20)] == ["ok"] * 20


def test_errors_and_crashes_are_contained(small_pool):
    out = small_pool.map(int, ["1", "x", "3"])
    assert [o.status for o in out] == ["ok", "error", "ok"]
    assert "ValueError" in out[1].error
    crashes = small_pool.stats.crashes
    out = small_pool.map(os._exit, [3])  # the worker process dies mid-item
    assert out[0].status == "error" and "exit code 3" in out[0].error
    assert small_pool.stats.crashes == crashes + 1
    out = small_pool.map(bytearray, [64 * 1024**3])  # 64 GiB: over the per-worker address-space limit
    assert out[0].status == "error" and "MemoryError" in out[0].error
    assert [o.value for o in small_pool.map(abs, [-1, -2])] == [1, 2]


def test_large_payloads_do_not_block(small_pool):
    items = ["x" * 200_000] * 40  # 8 MB in total: chunks are never pre-sent to a busy worker
    out = small_pool.map(len, items)
    assert [o.value for o in out] == [200_000] * 40


ADVERSARIAL = {
    "tower": ("\\boxed{10^{10^{10}}}", "5"),
    "factorial": ("\\boxed{1000000!}", "5"),
    "string_100kB": ("7" * 100_000, "7"),
    "boxed_100kB": ("\\boxed{" + "1+" * 50_000 + "1}", "5"),
    "nested_10k": ("\\boxed{" + "{" * 10_000 + "5" + "}" * 10_000 + "}", "5"),
    "unclosed_10k": ("\\boxed{" * 10_000, "5"),
    "frac_nest": ("\\boxed{" + "\\frac{1}{" * 300 + "2" + "}" * 300 + "}", "5"),
    "expand": ("\\boxed{(x+y+z+1)^{30}}", "(x+y+z+2)^{30}"),  # sympy needs ~10 s: hard timeout
    "integral": ("\\boxed{\\int_0^1 e^{x^{9}} \\sin(x^{7}) dx}", "0.3"),  # no result within 30 s: hard timeout
}


def test_adversarial_inputs_return_within_timeout():
    timeout = 1.5
    with RewardVerifier(num_workers=2, timeout_s=timeout) as v:
        v.wait_ready()
        start = time.monotonic()
        results = v.verify_batch(list(ADVERSARIAL.values()))
        wall = time.monotonic() - start
        by_name = dict(zip(ADVERSARIAL, results, strict=True))
        for name, r in by_name.items():
            assert not r.correct, name
            assert r.elapsed_s <= timeout + 1.0, (name, r.elapsed_s)
        assert by_name["tower"].detail == "too_large" and by_name["factorial"].detail == "too_large"
        assert by_name["expand"].reason == "timeout" and by_name["integral"].reason == "timeout"
        assert wall < 4 * timeout + 10  # two timeouts in parallel + two worker restarts (generous: shared CI cores)
        assert v.stats()["timeouts"] == 2
        # the pool is healthy afterwards: fresh workers give correct answers
        assert [r.reason for r in v.verify_batch([("\\boxed{1/2}", "0.5"), ("\\boxed{3}", "4")] * 10)] == [
            "correct",
            "wrong",
        ] * 10


def test_hard_timeout_without_the_size_guard():
    config = VerifyConfig(max_number_digits=None)  # let 10^{10^{10}} reach sympy
    with RewardVerifier(num_workers=1, timeout_s=1.0, config=config) as v:
        v.wait_ready()
        start = time.monotonic()
        r = v.verify("\\boxed{10^{10^{10}}}", "5")
        assert r.reason in ("timeout", "error") and not r.correct
        assert r.elapsed_s < 2.0 and time.monotonic() - start < 10.0
        assert v.verify("\\boxed{5}", "5").correct


def test_close_leaves_no_process_behind():
    v = RewardVerifier(num_workers=2, timeout_s=1.0)
    assert v.verify("\\boxed{2}", "2").correct
    pids = v.pool.pids
    assert all(_alive(pid) for pid in pids)
    v.close()
    v.close()  # idempotent
    assert not any(_alive(pid) for pid in pids)
    with pytest.raises(RuntimeError, match="closed"):
        v.verify("\\boxed{2}", "2")


def test_context_manager_closes_after_timeouts():
    with TimeoutPool(num_workers=2, timeout_s=0.3) as pool:
        pool.map(sleep_task, [10.0, 10.0, 0.0])
        pids = pool.pids
    assert not any(_alive(pid) for pid in pids)


def test_batch_dedupes_and_keeps_order(verifier):
    before = verifier.stats()["items"]
    pairs = [("\\boxed{4}", "4"), ("\\boxed{5}", "4")] * 50 + [(None, "4"), ("\\boxed{7}", 7)]
    results = verifier.verify_batch(pairs)  # type: ignore[arg-type]
    assert [r.correct for r in results[:4]] == [True, False, True, False]
    assert results[-2].reason == "error" and results[-1].correct
    assert verifier.stats()["items"] - before == 3
    assert verifier.verify_batch([]) == []


def test_usable_from_a_non_main_thread(verifier):
    """Ray actors and thread pools call from non-main threads, where signal-based timeouts cannot work."""
    import threading

    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", verifier.verify_batch([("\\boxed{x^2}", "x^2")])))
    thread.start()
    thread.join(timeout=30)
    assert out["r"][0].correct


def test_interrupted_map_leaves_no_stale_results(monkeypatch):
    with TimeoutPool(num_workers=1, timeout_s=5.0) as pool:
        calls = {"n": 0}
        real_collect = pool._collect

        def interrupting_collect(results, pending):
            calls["n"] += 1
            if calls["n"] == 2:
                raise KeyboardInterrupt
            return real_collect(results, pending)

        monkeypatch.setattr(pool, "_collect", interrupting_collect)
        with pytest.raises(KeyboardInterrupt):
            pool.map(sleep_task, [0.2, 0.2, 0.2])
        monkeypatch.setattr(pool, "_collect", real_collect)
        assert [o.value for o in pool.map(abs, [-5, -6])] == [5, 6]

"""The per-batch deadline of the verifier pool: a batch of items that each stay within the per-item limit cannot
hold a step longer than ``deadline_s``; the rest score ``timeout`` and are counted."""

from __future__ import annotations

import time

from reasonrl.rewards.pool import TimeoutPool, sleep_task


def test_batch_deadline_times_out_the_rest_and_counts_it():
    with TimeoutPool(num_workers=2, timeout_s=5.0, preload=()) as pool:
        pool.wait_ready()
        start = time.monotonic()
        out = pool.map(sleep_task, [0.6] * 8, chunk_size=1, deadline_s=1.0)
        elapsed = time.monotonic() - start
        assert elapsed < 1.8, elapsed
        statuses = [o.status for o in out]
        assert statuses[:2] == ["ok", "ok"] and statuses.count("timeout") >= 4, statuses
        assert pool.stats.batch_deadline_items == statuses.count("timeout")
        assert [o.status for o in pool.map(sleep_task, [0.0, 0.0])] == ["ok", "ok"]  # the pool goes on

"""``gather_watching``: waiting for some calls while failing at once when a call watched beside them fails."""

from __future__ import annotations

import asyncio

import pytest

from reasonrl.distributed.worker_group import gather_watching


async def _value(value, delay: float = 0.0):
    await asyncio.sleep(delay)
    return value


async def _fails(delay: float):
    await asyncio.sleep(delay)
    raise RuntimeError("engine died")


def test_returns_the_needed_results_in_order_and_leaves_the_watched_running():
    async def main():
        watched = asyncio.ensure_future(_value("loaded", 0.05))
        results = await gather_watching([_value(1, 0.01), _value(2)], watched=[watched])
        return results, watched.done(), await watched

    results, watched_done_on_return, watched_result = asyncio.run(main())
    assert results == [1, 2] and not watched_done_on_return and watched_result == "loaded"


def test_a_watched_failure_ends_the_wait_at_once():
    """The needed call would block for a minute (rank 0 in a broadcast to a dead engine); the watched one fails."""

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(RuntimeError, match="engine died"):
            await gather_watching([_value(1, 60)], watched=[_fails(0.01)])
        return loop.time() - start

    assert asyncio.run(main()) < 5


def test_a_needed_failure_is_raised():
    with pytest.raises(RuntimeError, match="engine died"):
        asyncio.run(gather_watching([_fails(0.0)], watched=[]))

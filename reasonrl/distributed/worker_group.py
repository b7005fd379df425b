"""Driver-side handle of one role: its Ray actors (one per data-parallel rank), created in their placement bundles.

    group = WorkerGroup(PolicyWorker, placement["policy"], name="policy")
    group.call("setup", config)                      # same arguments on every rank
    refs = put_per_rank([experience.ragged(idx) for idx in experience.shard_indices(group.world_size)])
    group.call_sharded("set_step_data", refs, step)  # each rank's shard of the step, sent once
    group.call_sharded("update_mini_batch", local_indices_per_rank, step, cfg, tokens, seqs)

Methods that run forward passes are collective (ZeRO-3), so they are always sent to every rank before waiting.
Object refs passed as top-level arguments are resolved by Ray on the worker: a shard put once can go to several
roles (policy and critic of the same world size) and several calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from loguru import logger


async def gather_all(refs: Sequence) -> list:
    """Await every ref / awaitable at once (``asyncio.gather``); the results as a list, in order."""
    return list(await asyncio.gather(*refs))


async def gather_watching(needed: Sequence, watched: Sequence) -> list:
    """The results of ``needed`` (refs / awaitables, awaited together), raising as soon as one of them or of
    ``watched`` fails. ``watched`` are never cancelled: they may still be running on return (await them later)."""
    everything = asyncio.ensure_future(gather_all(needed))
    watchers = [asyncio.ensure_future(ref) for ref in watched]  # a future or task passed in is itself
    for task in watchers:  # their errors are the caller's to raise when it awaits them; no "never retrieved" log
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
    try:
        pending = {everything, *watchers}
        while not everything.done():
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()
        return everything.result()
    finally:
        everything.cancel()  # a no-op once done


def put_per_rank(items: Sequence) -> list:
    """One object-store ref per item (``ray.put`` once, then pass the ref to as many calls as need it), or the
    items themselves when no Ray session is running (in-process groups of unit tests)."""
    import ray

    if not ray.is_initialized():
        return list(items)
    return [ray.put(item) for item in items]


class WorkerGroup:
    """``world_size`` actors of ``worker_cls`` forming one process group."""

    def __init__(
        self,
        worker_cls,
        placement=None,
        *,
        world_size: int | None = None,
        num_cpus_per_actor: float = 1,
        name: str = "",
        timeout_s: float = 1800,
    ):
        """Actors go to ``placement`` (a ``RolePlacement``) or, without one, anywhere with ``num_cpus_per_actor``."""
        import ray

        self.name = name or worker_cls.__name__
        self.world_size = placement.num_actors if placement is not None else (world_size or 1)
        actor_cls = ray.remote(worker_cls)
        self.actors = []
        for rank in range(self.world_size):
            options: dict[str, Any] = (
                placement.actor_options(rank) if placement is not None else {"num_cpus": num_cpus_per_actor}
            )
            self.actors.append(actor_cls.options(**options).remote(rank, self.world_size))
        try:
            addr, port = ray.get(self.actors[0].master_address.remote())
            ray.get([a.init_process_group.remote(addr, port, timeout_s) for a in self.actors])
        except BaseException:
            self.kill()  # the caller never gets a handle to clean up
            raise
        logger.info(f"{self.name}: {self.world_size} rank(s) joined at {addr}:{port}")

    def call(self, method: str, *args, **kwargs) -> list:
        """Run ``method(*args, **kwargs)`` on every rank; returns the per-rank results."""
        import ray

        return ray.get([getattr(a, method).remote(*args, **kwargs) for a in self.actors])

    def call_async(self, method: str, *args, **kwargs) -> list:
        """Like :meth:`call` but returns the object refs (to overlap with other roles)."""
        return [getattr(a, method).remote(*args, **kwargs) for a in self.actors]

    def call_sharded(self, method: str, shards: Sequence, *args, **kwargs) -> list:
        """Run ``method(shards[rank], *args, **kwargs)`` on every rank (a shard may be an object ref)."""
        import ray

        if len(shards) != self.world_size:
            raise ValueError(f"{self.name}: {len(shards)} shards for {self.world_size} ranks")
        return ray.get(
            [getattr(a, method).remote(s, *args, **kwargs) for a, s in zip(self.actors, shards, strict=True)]
        )

    def call_sharded_async(self, method: str, shards: Sequence, *args, **kwargs) -> list:
        """Like :meth:`call_sharded` but returns the object refs."""
        if len(shards) != self.world_size:
            raise ValueError(f"{self.name}: {len(shards)} shards for {self.world_size} ranks")
        return [getattr(a, method).remote(s, *args, **kwargs) for a, s in zip(self.actors, shards, strict=True)]

    def kill(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []

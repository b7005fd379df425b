"""Policy -> vLLM weight sync: gather ZeRO-3 shards in layer-aligned buckets, send them to every engine, verify.

:class:`WeightSyncer` runs the protocol on the driver: it tells the policy ranks to gather and send each bucket
(:class:`BucketSender`, through ``PolicyWorker``) and the engines to receive it; the policy ranks never call an
engine. Two transports carry the buckets from policy rank 0 to the engines:

* ``broadcast``: a process group of policy rank 0 and every engine worker
  (``sync_group``: gloo on CPU, NCCL on GPU), joined through vLLM's ``worker_extension_cls``; device to device,
  one broadcast per bucket and dtype. The transport for scale.
* ``object_store``: one ``ray.put`` per bucket (its flat buffers), read by every engine through
  ``collective_rpc``. Works for every placement, including GPUs shared by an engine and policy rank 0 (NCCL
  cannot have two ranks on one device); the fallback.

A sync is two calls, so that it fits vLLM's sleep rules under ``colocate_all`` (``engine_residency``):
:meth:`WeightSyncer.load` runs with only the engines' weights awake (device phase SYNC) and never generates;
:meth:`WeightSyncer.verify` runs once the KV cache is awake too (GENERATION), because it generates.

Two checks (``sync_checks``):

* exact, in :meth:`~WeightSyncer.load`: rank 0 fingerprints every tensor it sends (``weight_digest``, on its
  device), every engine worker fingerprints every tensor it receives and the parameters it can predict from them
  (``vllm_worker_extension``); a missed bucket, a corrupted copy or a stale parameter is named, bit-exact in any
  dtype;
* end to end, in :meth:`~WeightSyncer.verify` (``sync_probe``): a fixed prompt (a VLM's with its picture, so that
  the vision tower is scored too) scored by every engine (vLLM prompt log-probs) against the trainer's log-probs
  (:class:`DifferentialProbe`: the change across each sync must match, which is bf16-safe). The trainer side comes
  from the weights rank 0 just sent (``sent_weights``: a host model, no second gather; the CPU default) or from the
  training model's own forward (``trainer_forward``: the GPU default).

Buckets never split a unit the engine reloads whole (``reload_units``: decoder layers, vision blocks, the model's
stages beside them, every fused module): vLLM's layer-wise reload finalises each module at the end of a
``reload_weights`` call, so a module whose gate/up (or q/k/v) arrive in different calls would be rebuilt from
partial data, the missing part from uninitialised memory. The plan is derived from the trainer's module tree and
checked against the engine's own modules before the first bucket moves. A unit larger than ``bucket_bytes`` gets a
bucket of its own.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from reasonrl.distributed import sync_group
from reasonrl.distributed.bucket_sender import KeepSent
from reasonrl.distributed.reload_units import check_plan, plan_buckets
from reasonrl.distributed.sync_checks import DifferentialProbe, check_received
from reasonrl.distributed.sync_probe import VERIFY_SOURCES, EndToEndProbe, ProbeInput
from reasonrl.distributed.worker_group import gather_all, gather_watching


@dataclass
class SyncReport:
    """What one sync moved and how long it took. ``check_s`` / ``params_checked`` of ``params_total``: the exact
    check (fingerprints of every tensor received, and of every engine parameter predictable from them, summed over
    the engine workers; which were not, and why, is logged once by :class:`WeightSyncer`); ``verify_s`` /
    ``probe_max_abs_diff``: the end-to-end probe (NaN until :meth:`WeightSyncer.verify` ran);
    ``reload_warnings_dropped``: vLLM's per-module partial-reload warnings dropped on the engine workers."""

    num_tensors: int
    num_buckets: int
    num_bytes: int
    gather_s: float
    load_s: float
    check_s: float = 0.0
    params_checked: int = 0
    reload_warnings_dropped: int = 0
    verify_s: float = 0.0
    probe_max_abs_diff: float = float("nan")
    params_total: int = 0
    probe_tokens: int = 0
    probe_images: int = 0

    @property
    def total_s(self) -> float:
        return self.gather_s + self.load_s + self.check_s + self.verify_s

    def as_metrics(self) -> dict[str, float]:
        return {
            "sync/bytes": float(self.num_bytes),
            "sync/buckets": float(self.num_buckets),
            "sync/gather_s": self.gather_s,
            "sync/load_s": self.load_s,
            "sync/check_s": self.check_s,
            "sync/params_checked": float(self.params_checked),
            "sync/params_total": float(self.params_total),
            "sync/reload_warnings_dropped": float(self.reload_warnings_dropped),
            "sync/verify_s": self.verify_s,
            "sync/total_s": self.total_s,
            "sync/probe_max_abs_diff": self.probe_max_abs_diff,
            "sync/probe_tokens": float(self.probe_tokens),
            "sync/probe_images": float(self.probe_images),
        }


# ---------------------------------------------------------------------------------------------- transports
TRANSPORTS = ("object_store", "broadcast", "ipc")


def resolve_transport(transport: str, device: str, colocated: bool) -> str:
    """``auto`` -> ``broadcast`` (a process group from policy rank 0 to every engine worker), except on GPUs where
    the engines share devices with the policy (``colocate_all``): NCCL refuses two ranks on one GPU, so there each
    policy rank hands its engine worker the bucket by CUDA IPC (``ipc``)."""
    if transport != "auto":
        if transport not in TRANSPORTS:
            raise ValueError(f"sync_transport must be 'auto' or one of {TRANSPORTS}, got {transport!r}")
        return transport
    return "ipc" if device == "gpu" and colocated else "broadcast"


def resolve_verify_source(source: str, device: str) -> str:
    """``auto`` -> ``sent_weights`` on CPU (a forward of the ZeRO-3 training model over gloo gathers every layer
    again, ~1-4 s for a 32-token probe of SmolLM2 on 2 CPU ranks), ``trainer_forward`` on GPU (cheap over NCCL)."""
    if source != "auto":
        if source not in VERIFY_SOURCES:
            raise ValueError(f"sync_verify_with must be 'auto' or one of {VERIFY_SOURCES}, got {source!r}")
        return source
    return "sent_weights" if device == "cpu" else "trainer_forward"


# ---------------------------------------------------------------------------------------------- the driver
@dataclass
class _BucketPlan:
    """The buckets of one sync's parameters: names per bucket, their layouts, each name's bucket, totals."""

    buckets: list[list[str]]
    layouts: list[list[tuple[str, tuple[int, ...], str]]]
    bucket_of: dict[str, int]
    num_tensors: int
    num_bytes: int

    @classmethod
    def of(cls, layout: Sequence[tuple], bucket_bytes: int) -> _BucketPlan:
        """``layout``: ``(name, shape, dtype, unit)`` per tensor (``BucketSender.layout``); without the unit, each
        name's unit is read from the name (``reload_units.name_unit``)."""
        by_name = {row[0]: (row[0], tuple(row[1]), row[2]) for row in layout}
        units = {row[0]: row[3] for row in layout if len(row) > 3} or None
        sizes = [(name, sync_group.numel(shape) * _itemsize(dtype)) for name, shape, dtype in by_name.values()]
        size_of = dict(sizes)
        # smallest first, largest last (stable): the engines start after a short first gather, and rank 0 scores
        # the sent_weights probe while the engines load the largest bucket
        buckets = sorted(plan_buckets(sizes, bucket_bytes, units), key=lambda names: sum(size_of[n] for n in names))
        return cls(
            buckets=buckets,
            layouts=[[by_name[n] for n in names] for names in buckets],
            bucket_of={name: k for k, names in enumerate(buckets) for name in names},
            num_tensors=len(sizes),
            num_bytes=sum(size for _, size in sizes),
        )


class WeightSyncer:
    """The weight-sync protocol, run by the driver (the trainer): it orchestrates the policy ranks and the engines;
    the policy ranks never call an engine. One per (policy group, engines); it keeps the bucket plan, the broadcast
    group and the differential probe's calibration across syncs.

    One sync (:meth:`load` then :meth:`verify`; :meth:`sync` runs both)::

        for bucket in plan_buckets(param sizes):           # never splitting a reload unit; smallest first
            broadcast:    engines: receive_weights(layout)  ||  policy ranks: gather to rank 0, rank 0 broadcasts
                          (an engine receives bucket k+1 while it loads k)
            object_store: policy ranks: gather, rank 0 ray.put  ->  engines: load_packed(layout, ref)
            (an engine loads bucket k while the policy gathers bucket k+1)
        check:  every engine worker's fingerprints of what it received and holds vs rank 0's of what it sent
        verify: every engine's probe log-probs vs the trainer's (sent_weights: rank 0's host model on the weights
                it sent, scored while the engines load the last bucket; trainer_forward: the training model's
                forward), DifferentialProbe -> WeightSyncError

    ``sent_weights`` proves every engine holds exactly what rank 0 sent, and moved as the weights moved; it does not
    re-check the gather, which is bit-tested against DeepSpeed's own all-gather. It keeps one full copy of the
    model in rank 0's host memory for the duration of the sync.
    """

    def __init__(
        self,
        policy,
        engines: Sequence,
        *,
        bucket_bytes: int,
        tol: float,
        exact: bool,
        transport: str,
        verify_with: str,
        device: str = "cpu",
        timeout_s: float = 600,
        trainable_only: bool = False,
    ):
        """``trainable_only`` (a frozen vision tower): the first sync sends every parameter, later ones only those
        that train (the others never change); the engines must keep their weights between syncs (no level-2
        sleep: an engine whose weights were discarded refuses to generate until it has received every one)."""
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        self.policy, self.engines = policy, list(engines)
        self.bucket_bytes, self.tol, self.exact = bucket_bytes, tol, exact
        self.transport, self.verify_with = transport, verify_with
        self.backend = "nccl" if device == "gpu" else "gloo"
        self.timeout_s = timeout_s
        self.end_to_end = EndToEndProbe(policy, engines, tol=tol, exact=exact, verify_with=verify_with)
        self.buckets: list[list[str]] | None = None
        self.layouts: list[list[tuple[str, tuple[int, ...], str]]] = []
        self.bucket_of: dict[str, int] = {}
        self.workers: list[int] = []  # vLLM workers per engine
        self.num_tensors = self.num_bytes = 0
        self.joined = False
        self.trainable_only = trainable_only
        self.plans: dict[str, _BucketPlan] = {}  # "all" parameters, and "trainable" ones when trainable_only
        self.all_names: list[str] = []
        self.synced_once = False
        self.check_summary: str | None = None  # the exact check's last line about unchecked parameters (logged)

    @property
    def probe(self) -> DifferentialProbe | None:
        """The end-to-end probe's differential check (calibrated by the first verify; None before)."""
        return self.end_to_end.check

    def run(self, probe: ProbeInput | Sequence[int] | None) -> SyncReport:
        """:meth:`sync` from synchronous code (scripts, tests); not inside a running event loop."""
        import asyncio

        return asyncio.run(self.sync(probe))

    async def sync(self, probe: ProbeInput | Sequence[int] | None) -> SyncReport:
        """:meth:`load`, then :meth:`verify` (engines fully awake: split placement, scripts, tests)."""
        report = await self.load(probe)
        if probe is not None:
            await self.verify(probe, report)
        return report

    async def load(self, probe: ProbeInput | Sequence[int] | None = None) -> SyncReport:
        """Send the policy's current weights to every engine and check them exactly (raises WeightSyncError).

        Legal while the engines' KV cache sleeps (device phase SYNC): it loads weights and reads fingerprints, it
        never generates. ``probe`` (``sync_probe.ProbeInput``, or a text probe's token ids): the probe a
        :meth:`verify` of the same probe follows with; with ``sent_weights`` rank 0 keeps the tensors it sends and
        scores the probe on them as soon as the last bucket is sent, while the engines load it and check (no engine
        is involved: legal in SYNC)."""
        probe = ProbeInput.of(probe)
        await self._plan()
        self._use_plan("trainable" if self.trainable_only and self.synced_once else "all")
        if self.transport == "broadcast" and not self.joined:
            await self._join()
        keeps = self.end_to_end.keeps_sent(probe)
        self.end_to_end.loading()
        share_ranks = sum(self.workers) if self.transport == "ipc" else 1
        start, gather_s, loads, sent_digests = time.perf_counter(), 0.0, [], {}
        try:
            for k, (names, layout) in enumerate(zip(self.buckets, self.layouts, strict=True)):
                _raise_failed(loads)  # an engine that failed to load a bucket stops the sync here
                keep = KeepSent.NONE if not keeps else KeepSent.NEW if k == 0 else KeepSent.ADD
                send = ("send_bucket", names, self.transport, keep, share_ranks)
                if self.transport == "broadcast":  # the engines wait for the broadcast the ranks are about to send
                    receives = self.engine_loads(k, layout, None)
                    sends = self.policy.call_async(*send)
                    # the ranks' send of bucket k ends when the engines received it; they load it while the ranks
                    # gather bucket k+1 (an engine runs its calls in order: it receives k+1 once k is loaded). Any
                    # engine call failing fails the sync at once; rank 0 would otherwise wait in the broadcast for
                    # a dead engine until the group's timeout
                    sent = await gather_watching([*sends, *loads], watched=receives)
                    sent, loads = sent[: len(sends)], receives
                elif self.transport == "ipc":  # one bucket shared at a time: the sender frees the last one first
                    await gather_all(loads)
                    sent = await gather_all(self.policy.call_async(*send))
                    loads = self.engine_loads(k, layout, sent)
                else:
                    sent = await gather_all(self.policy.call_async(*send))
                    await gather_all(loads)  # at most one bucket in flight per engine
                    loads = self.engine_loads(k, layout, sent)
                gather_s += sent[0]["gather_s"]
                sent_digests |= sent[0]["digests"]
            if keeps:  # rank 0 is free once the last bucket is sent: it scores the probe while the engines load
                self.end_to_end.sent(probe)
            await gather_all(loads)
        finally:
            if self.transport == "ipc":
                await gather_all(self.policy.call_async("release_shared"))
        load_s = time.perf_counter() - start - gather_s
        start = time.perf_counter()
        # every parameter the engines need to be whole: an engine that lost its weights (level-2 sleep) and got
        # only the trainable ones stays unable to generate (EngineResidency)
        finished = await gather_all([engine.finish_weight_sync.remote(self.all_names) for engine in self.engines])
        exact = check_received(sent_digests, self.bucket_of, finished)
        summary = exact.summary()
        if summary is not None and summary != self.check_summary:  # once, and again only when it changes
            from loguru import logger

            logger.info(summary)
        self.check_summary = summary
        self.synced_once = True
        check_s = time.perf_counter() - start
        return SyncReport(
            self.num_tensors,
            len(self.buckets),
            self.num_bytes,
            gather_s,
            load_s,
            check_s,
            exact.checked,
            exact.dropped,
            params_total=exact.total,
        )

    def engine_loads(self, k: int, layout, sent: Sequence[dict] | None) -> list:
        """Every engine's call that loads bucket ``k``; ``sent``: the policy ranks' ``send_bucket`` results (None
        for the broadcast, which the engines receive from the group). ``ipc``: engine ``e`` gets the handles of the
        policy ranks on its devices, ranks ``sum(workers of engines < e) + w`` (``colocate_all`` lays engines and
        policy ranks over the same bundles in the same order); each worker opens those made on its own GPU, found
        by UUID (``shared_buffers.pick_handles``: a worker's device need not follow the bundle order)."""
        if sent is None:  # broadcast: each engine receives bucket k+1 while it loads k
            following = self.layouts[k + 1] if k + 1 < len(self.layouts) else None
            return [engine.receive_weights.remote(layout, following) for engine in self.engines]
        if self.transport == "ipc":
            calls, rank = [], 0
            for engine, count in zip(self.engines, self.workers, strict=True):
                handles = [sent[rank + w]["handles"] for w in range(count)]
                calls.append(engine.load_shared.remote(layout, handles))
                rank += count
            return calls
        return [engine.load_packed.remote(layout, sent[0]["ref"][0]) for engine in self.engines]

    async def verify(self, probe: ProbeInput | Sequence[int], report: SyncReport) -> SyncReport:
        """The end-to-end probe after :meth:`load` (engines fully awake: it generates): every engine's prompt
        log-probs against the trainer's, :class:`DifferentialProbe` (raises WeightSyncError). Fills ``report``."""
        return await verify_into(self.end_to_end, ProbeInput.of(probe), report)

    async def _plan(self) -> None:
        if self.plans:
            return
        self.workers = await gather_all([engine.num_workers.remote() for engine in self.engines])
        if self.transport == "ipc" and sum(self.workers) > self.policy.world_size:
            raise ValueError(
                f"sync_transport=ipc needs a policy rank on the device of every engine worker: {sum(self.workers)} "
                f"engine workers, {self.policy.world_size} policy ranks. Use colocate_all with the policy on every "
                "engine device, or sync_transport=broadcast"
            )
        layout = await self.policy.actors[0].sync_layout.remote()
        self.all_names = [row[0] for row in layout]
        self.plans["all"] = _BucketPlan.of(layout, self.bucket_bytes)
        if self.trainable_only:
            trainable = await self.policy.actors[0].sync_layout.remote(trainable_only=True)
            self.plans["trainable"] = _BucketPlan.of(trainable, self.bucket_bytes)
        # the engine's own modules: the HF tensors that feed each one must share a bucket (refused here otherwise)
        fused = await self.engines[0].reload_groups.remote(self.all_names)
        for plan in self.plans.values():
            check_plan(plan.buckets, fused, what="vLLM module")
        self._use_plan("all")

    def _use_plan(self, which: str) -> None:
        plan = self.plans[which]
        self.buckets, self.layouts, self.bucket_of = plan.buckets, plan.layouts, plan.bucket_of
        self.num_tensors, self.num_bytes = plan.num_tensors, plan.num_bytes

    async def _join(self) -> None:
        """The broadcast group: policy rank 0 (root, on its node's address) and every worker of every engine."""
        address, port = await self.policy.actors[0].master_address.remote()
        world_size = 1 + sum(self.workers)
        joins, first_rank = [], 1
        for engine, count in zip(self.engines, self.workers, strict=True):
            joins.append(engine.join_weight_group.remote(address, port, first_rank, world_size, self.backend))
            first_rank += count
        joins.append(self.policy.actors[0].join_weight_group.remote(address, port, world_size, self.timeout_s))
        await gather_all(joins)
        self.joined = True


async def verify_into(end_to_end: EndToEndProbe, probe: ProbeInput, report: SyncReport) -> SyncReport:
    """Run the end-to-end probe and fill ``report``'s probe fields and ``verify_s`` (both syncers' verify)."""
    start = time.perf_counter()
    result = await end_to_end.verify(probe)
    report.probe_max_abs_diff, report.probe_tokens, report.probe_images = (
        result.max_abs_diff,
        result.tokens,
        result.images,
    )
    report.verify_s = time.perf_counter() - start
    return report


def _raise_failed(refs: Sequence) -> None:
    """Raise the error of any finished ref (an engine that failed to load); leaves the unfinished ones."""
    import ray

    if refs:
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        ray.get(done)


def _itemsize(dtype: str) -> int:
    import torch

    return getattr(torch, dtype).itemsize

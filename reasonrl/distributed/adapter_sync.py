"""Adapter-only weight sync for LoRA policies (``lora_sync=adapter``): the engines loaded the frozen base model at
start-up (the policy's base never changes), and each sync sends only the adapter, registered with vLLM's LoRA
support as the policy's next version.

One sync (:meth:`AdapterSyncer.load` then :meth:`AdapterSyncer.verify`, the interface of ``WeightSyncer``)::

    policy ranks: gather the adapter (collective); rank 0 writes it as PEFT does -> {file name: bytes}
    driver:       one ray.put of the files -> every engine: load_adapter(version, files)   (vLLM add_lora)
    verify:       every engine's probe log-probs (served with the new adapter) vs the training model's forward,
                  DifferentialProbe -> WeightSyncError

What moves is the adapter: ~1% of a 7B model's bytes at rank 32 (the merged sync moves the whole model). There is
no exact tensor check as in the merged sync (vLLM keeps the adapter in its own stacked layout, not in parameters a
public API reads); the probe is the check, in fp32 to 1e-4 as the merged sync's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from reasonrl.distributed.sync_checks import DifferentialProbe
from reasonrl.distributed.weight_sync import SyncReport
from reasonrl.distributed.worker_group import gather_all


class AdapterSyncer:
    """The adapter-only sync protocol, run by the driver (see the module docstring). ``version`` counts the syncs;
    each engine keeps the adapters of its last ``lora_versions`` syncs (``VLLMEngine``)."""

    def __init__(self, policy, engines: Sequence, *, tol: float, exact: bool):
        self.policy, self.engines = policy, list(engines)
        self.tol, self.exact = tol, exact
        self.version = 0
        self.probe: DifferentialProbe | None = None
        self.registered: list[list[int]] = []  # per engine: the adapter versions it holds after the last sync

    async def load(self, probe_ids: Sequence[int] | None = None) -> SyncReport:
        """Gather the adapter, register it on every engine as the next version. ``probe_ids`` is accepted for the
        ``WeightSyncer`` interface (the probe here always runs the training model's forward, in :meth:`verify`)."""
        import ray

        start = time.perf_counter()
        sent = [part for part in await gather_all(self.policy.call_async("adapter_files")) if part is not None]
        if len(sent) != 1:
            raise RuntimeError(f"adapter sync: expected the adapter from policy rank 0 only, got {len(sent)} parts")
        files = sent[0]["files"]
        gather_s = time.perf_counter() - start
        start = time.perf_counter()
        self.version += 1
        ref = ray.put(files)
        self.registered = await gather_all([engine.load_adapter.remote(self.version, ref) for engine in self.engines])
        return SyncReport(
            num_tensors=sent[0]["tensors"],
            num_buckets=1,
            num_bytes=sum(len(data) for data in files.values()),
            gather_s=gather_s,
            load_s=time.perf_counter() - start,
        )

    async def verify(self, probe_ids: Sequence[int], report: SyncReport) -> SyncReport:
        """Every engine's probe log-probs against the training model's (:class:`DifferentialProbe`; raises
        ``WeightSyncError``). Fills ``report``."""
        start = time.perf_counter()
        probe_ids = list(probe_ids)
        first = self.probe is None
        engine_refs = [engine.prompt_logprobs.remote(probe_ids) for engine in self.engines]
        repeat_refs = [engine.prompt_logprobs.remote(probe_ids) for engine in self.engines] if first else None
        trainer = (await gather_all(self.policy.call_async("probe_logprobs", probe_ids)))[0]
        if self.probe is None:
            self.probe = DifferentialProbe(tol=self.tol, exact=self.exact)
        repeat = await gather_all(repeat_refs) if repeat_refs is not None else None
        report.probe_max_abs_diff = self.probe.check(await gather_all(engine_refs), trainer, engine_repeat=repeat)
        report.verify_s = time.perf_counter() - start
        return report

    async def sync(self, probe_ids: Sequence[int] | None) -> SyncReport:
        report = await self.load(probe_ids)
        return report if probe_ids is None else await self.verify(probe_ids, report)

    def run(self, probe_ids: Sequence[int] | None) -> SyncReport:
        """:meth:`sync` from synchronous code (scripts, tests)."""
        import asyncio

        return asyncio.run(self.sync(probe_ids))

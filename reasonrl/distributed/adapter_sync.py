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
from reasonrl.distributed.sync_probe import EndToEndProbe, ProbeInput
from reasonrl.distributed.weight_sync import SyncReport, verify_into
from reasonrl.distributed.worker_group import gather_all


class AdapterSyncer:
    """The adapter-only sync protocol, run by the driver (see the module docstring). ``version`` counts the syncs;
    each engine keeps the adapters of its last ``lora_versions`` syncs (``VLLMEngine``)."""

    def __init__(self, policy, engines: Sequence, *, tol: float, exact: bool):
        self.policy, self.engines = policy, list(engines)
        self.tol, self.exact = tol, exact
        self.version = 0
        self.end_to_end = EndToEndProbe(policy, engines, tol=tol, exact=exact, verify_with="trainer_forward")
        self.registered: list[list[int]] = []  # per engine: the adapter versions it holds after the last sync

    @property
    def probe(self) -> DifferentialProbe | None:
        """The end-to-end probe's differential check (calibrated by the first verify; None before)."""
        return self.end_to_end.check

    async def load(self, probe: ProbeInput | Sequence[int] | None = None) -> SyncReport:
        """Gather the adapter, register it on every engine as the next version. ``probe`` is accepted for the
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

    async def verify(self, probe: ProbeInput | Sequence[int], report: SyncReport) -> SyncReport:
        """Every engine's probe log-probs against the training model's (``sync_probe``, :class:`DifferentialProbe`;
        raises ``WeightSyncError``). Fills ``report``."""
        return await verify_into(self.end_to_end, ProbeInput.of(probe), report)

    async def sync(self, probe: ProbeInput | Sequence[int] | None) -> SyncReport:
        report = await self.load(probe)
        return report if probe is None else await self.verify(probe, report)

    def run(self, probe: ProbeInput | Sequence[int] | None) -> SyncReport:
        """:meth:`sync` from synchronous code (scripts, tests)."""
        import asyncio

        return asyncio.run(self.sync(probe))

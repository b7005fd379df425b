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

Verification scores a fixed probe sequence on every engine (vLLM prompt log-probs) and compares it with the
trainer's log-probs of the same sequence (:class:`DifferentialProbe`: the change across each sync must match, which
is bf16-safe). The trainer side comes from the weights rank 0 just sent (``sent_weights``: a host model, no second
gather; the CPU default) or from the training model's own forward (``trainer_forward``: the GPU default).

Buckets never split a decoder layer: vLLM's layer-wise reload finalises each layer at the end of a
``reload_weights`` call, so a layer whose q/k/v (or gate/up) arrive in different calls would be rebuilt from
partial data. A layer larger than ``bucket_bytes`` gets a bucket of its own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reasonrl.distributed import sync_group
from reasonrl.distributed.worker_group import gather_all

_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


def layer_group(name: str) -> str:
    """The unit that must reload together: ``model.layers.7.self_attn.q_proj.weight`` -> ``model.layers.7``.

    Parameters outside the decoder stack (embeddings, final norm, lm_head) are their own groups.
    """
    match = _LAYER.match(name)
    return match.group(1) if match else name


def plan_buckets(
    named_sizes: Iterable[tuple[str, int]], bucket_bytes: int, group_key: Callable[[str], str] = layer_group
) -> list[list[str]]:
    """Split parameter names (in order) into buckets of at most ``bucket_bytes``, never splitting a group.

    ``named_sizes`` yields ``(name, size_in_bytes)``. Parameters of one group must be contiguous in the order
    (true for ``named_parameters()`` of HF models). A group larger than ``bucket_bytes`` becomes its own bucket.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    groups: list[tuple[str, list[str], int]] = []
    for name, size in named_sizes:
        key = group_key(name)
        if groups and groups[-1][0] == key:
            groups[-1][1].append(name)
            groups[-1] = (key, groups[-1][1], groups[-1][2] + size)
        else:
            if any(g[0] == key for g in groups):
                raise ValueError(f"parameters of group {key!r} are not contiguous (at {name!r})")
            groups.append((key, [name], size))
    buckets: list[list[str]] = []
    current: list[str] = []
    current_bytes = 0
    for _, names, size in groups:
        if current and current_bytes + size > bucket_bytes:
            buckets.append(current)
            current, current_bytes = [], 0
        current.extend(names)
        current_bytes += size
    if current:
        buckets.append(current)
    return buckets


@dataclass
class SyncReport:
    """What one sync moved and how long it took; ``probe_max_abs_diff`` is the verification result."""

    num_tensors: int
    num_buckets: int
    num_bytes: int
    gather_s: float
    load_s: float
    verify_s: float
    probe_max_abs_diff: float

    @property
    def total_s(self) -> float:
        return self.gather_s + self.load_s + self.verify_s

    def as_metrics(self) -> dict[str, float]:
        return {
            "sync/bytes": float(self.num_bytes),
            "sync/buckets": float(self.num_buckets),
            "sync/gather_s": self.gather_s,
            "sync/load_s": self.load_s,
            "sync/verify_s": self.verify_s,
            "sync/total_s": self.total_s,
            "sync/probe_max_abs_diff": self.probe_max_abs_diff,
        }


class WeightSyncError(RuntimeError):
    """An engine does not hold the weights the trainer just sent (the probe disagrees)."""


def check_probe(engine_logprobs: Sequence[Sequence[float]], trainer_logprobs: Sequence[float], tol: float) -> float:
    """Max |engine - trainer| over every engine's probe log-probs; raises WeightSyncError above ``tol``."""
    worst = 0.0
    for i, lps in enumerate(engine_logprobs):
        if len(lps) != len(trainer_logprobs):
            raise WeightSyncError(f"engine {i}: probe has {len(lps)} log-probs, trainer {len(trainer_logprobs)}")
        diffs = [abs(a - b) for a, b in zip(lps, trainer_logprobs, strict=True)]
        diff = float("nan") if any(d != d for d in diffs) else max(diffs, default=0.0)  # NaN means broken weights
        if not diff <= tol:  # also catches NaN
            raise WeightSyncError(
                f"engine {i} disagrees with the trainer after weight sync: max |logprob diff| = {diff:.3g} > "
                f"tolerance {tol:.3g}. The engine did not load the new weights (or loaded them wrongly)."
            )
        worst = max(worst, diff)
    return worst


def _max_abs(values: Iterable[float]) -> float:
    """Max |v|; NaN if any value is NaN (broken weights must never pass as a small difference)."""
    values = [abs(v) for v in values]
    return float("nan") if any(v != v for v in values) else max(values, default=0.0)


@dataclass
class DifferentialProbe:
    """Verifies each sync by the *change* of the probe log-probs across it, not their absolute agreement.

    In bf16 the engine and the trainer disagree on identical weights by more than one optimizer step moves the probe
    (different attention kernels and reduction orders: ~0.2-0.3 nats on a real probe vs ~0.004 for one AdamW step at
    lr 1e-6), so an absolute tolerance either fails a correct sync or passes a missed one. Both sides' kernels are
    deterministic, though, so across a sync:

    * a missed sync leaves the engine's probe log-probs unchanged (within ``repeat_noise``, the engine's run-to-run
      spread measured at the first check) while the trainer's moved -> :class:`WeightSyncError`;
    * a wrong load moves the engine differently from the trainer: ``max |engine change - trainer change| > tol``
      -> :class:`WeightSyncError`.

    With ``exact`` (fp32, where both sides agree to ~1e-5) the absolute check of :func:`check_probe` replaces the
    change comparison (the missed-sync check stays). The first call only calibrates (and, in bf16, rejects a
    disagreement above ``sanity_tol``: wholly wrong weights).
    """

    tol: float
    exact: bool
    sanity_tol: float = 1.0
    repeat_noise: float = 0.0
    prev_engine: list[list[float]] | None = None
    prev_trainer: list[float] | None = None

    def check(
        self,
        engine_logprobs: Sequence[Sequence[float]],
        trainer_logprobs: Sequence[float],
        engine_repeat: Sequence[Sequence[float]] | None = None,
    ) -> float:
        """Verify one sync; returns the worst |engine - trainer| (first call) or |engine change - trainer change|.

        ``engine_repeat`` (a second query of the same probe, first call only) calibrates ``repeat_noise``.
        """
        engine = [list(map(float, lps)) for lps in engine_logprobs]
        trainer = list(map(float, trainer_logprobs))
        absolute = check_probe(engine, trainer, self.tol if self.exact else max(self.sanity_tol, self.tol))
        if self.prev_engine is None or self.prev_trainer is None:
            if engine_repeat is not None:
                self.repeat_noise = max(
                    (
                        _max_abs(a - b for a, b in zip(e, r, strict=True))
                        for e, r in zip(engine, engine_repeat, strict=True)
                    ),
                    default=0.0,
                )
            worst = absolute
        else:
            if len(self.prev_engine) != len(engine):
                raise WeightSyncError(f"{len(engine)} engines answered the probe, {len(self.prev_engine)} before")
            d_trainer = [a - b for a, b in zip(trainer, self.prev_trainer, strict=True)]
            trainer_move = _max_abs(d_trainer)
            worst = 0.0
            for i, (now, before) in enumerate(zip(engine, self.prev_engine, strict=True)):
                d_engine = [a - b for a, b in zip(now, before, strict=True)]
                if trainer_move > self.repeat_noise and not _max_abs(d_engine) > self.repeat_noise:
                    raise WeightSyncError(
                        f"engine {i} did not change across the weight sync (max |change| <= {self.repeat_noise:.3g}) "
                        f"while the trainer's probe log-probs moved by up to {trainer_move:.3g}: the engine did not "
                        "load the new weights."
                    )
                diff = _max_abs(a - b for a, b in zip(d_engine, d_trainer, strict=True))
                if self.exact:  # the absolute check above already bounds both sides; a change may differ by 2 tol
                    worst = max(worst, absolute)
                    continue
                if not diff <= self.tol:  # also catches NaN
                    raise WeightSyncError(
                        f"engine {i} changed differently from the trainer across the weight sync: max |engine change "
                        f"- trainer change| = {diff:.3g} > tolerance {self.tol:.3g}. It loaded wrong weights."
                    )
                worst = max(worst, diff)
        self.prev_engine, self.prev_trainer = engine, trainer
        return worst


def timed(fn: Callable, *args, **kwargs):
    """``(result, seconds)`` of one call."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


# ---------------------------------------------------------------------------------------------- transports
TRANSPORTS = ("object_store", "broadcast")
VERIFY_SOURCES = ("sent_weights", "trainer_forward")


def resolve_transport(transport: str, device: str, colocated: bool) -> str:
    """``auto`` -> ``broadcast`` (a process group from policy rank 0 to every engine worker), except on GPUs where
    an engine shares a device with policy rank 0 (``colocate_all``): NCCL refuses two ranks on one GPU, so that
    case keeps the object store."""
    if transport != "auto":
        if transport not in TRANSPORTS:
            raise ValueError(f"sync_transport must be 'auto' or one of {TRANSPORTS}, got {transport!r}")
        return transport
    return "object_store" if device == "gpu" and colocated else "broadcast"


def resolve_verify_source(source: str, device: str) -> str:
    """``auto`` -> ``sent_weights`` on CPU (a forward of the ZeRO-3 training model over gloo gathers every layer
    again, ~1-4 s for a 32-token probe of SmolLM2 on 2 CPU ranks), ``trainer_forward`` on GPU (cheap over NCCL)."""
    if source != "auto":
        if source not in VERIFY_SOURCES:
            raise ValueError(f"sync_verify_with must be 'auto' or one of {VERIFY_SOURCES}, got {source!r}")
        return source
    return "sent_weights" if device == "cpu" else "trainer_forward"


# ---------------------------------------------------------------------------------------------- policy ranks
class BucketSender:
    """The policy ranks' part of a sync (one per rank, called through ``PolicyWorker``): gather a bucket to rank 0,
    which sends it over the chosen transport and keeps it for the probe. It never calls an engine: the driver
    (:class:`WeightSyncer`) tells the engines what to receive.
    """

    def __init__(self, module, rank: int, backend: str):
        self.module = module
        self.rank = rank
        self.backend = backend  # the policy group's: gloo (CPU) or nccl (GPU)
        self.group = None  # the weight-broadcast group (rank 0 only)
        self.sent: dict[str, Any] = {}  # rank 0: the tensors of this sync, for the sent_weights probe

    def layout(self) -> list[tuple[str, tuple[int, ...], str]]:
        """``(name, full shape, dtype)`` of every parameter in ``named_parameters()`` order (ZeRO-3: the full
        shape, not the partition's)."""
        return [
            (n, tuple(getattr(p, "ds_shape", p.shape)), str(p.dtype).removeprefix("torch."))
            for n, p in self.module.named_parameters()
        ]

    def join(self, address: str, port: int, world_size: int, timeout_s: float) -> None:
        """Rank 0 joins the weight-broadcast group as its root (with every engine worker)."""

        self.group = sync_group.create_group(address, port, 0, world_size, self.backend, timeout_s)

    def send(self, names: Sequence[str], transport: str, keep: bool, first: bool) -> dict[str, Any] | None:
        """Gather the bucket ``names`` to rank 0 (collective) and send it. Returns, on rank 0, ``gather_s``,
        ``send_s`` and for the object store ``ref``: a one-element list holding the ``ObjectRef`` of the bucket's
        flat buffers (in a list, so that Ray hands the driver the ref rather than the value). ``keep``: rank 0
        keeps the tensors for :meth:`sent_logprobs`; ``first`` starts a new sync."""
        from reasonrl.distributed import deepspeed_engine as ds

        if first:
            self.sent = {}
        on_device = transport == "broadcast" and self.backend == "nccl"  # NCCL broadcasts device to device
        device = next(self.module.parameters()).device if on_device else "cpu"
        tensors, gather_s = timed(ds.gather_params, self.module, list(names), device=device)
        if self.rank != 0:
            return None
        named = list(tensors.items())
        start = time.perf_counter()
        ref = None
        if transport == "broadcast":
            if self.group is None:
                raise RuntimeError("send_bucket(broadcast) before join_weight_group")
            for buffer in sync_group.pack(named):
                sync_group.broadcast(self.group, buffer)
        else:
            import ray

            # the flat buffers, never the tensors: pickling a view serialises its whole storage, so each view of
            # the gathered bucket would carry the entire bucket
            ref = [ray.put(sync_group.pack(named))]
        if keep:
            self.sent |= {n: t.cpu() for n, t in named}
        return {"gather_s": gather_s, "send_s": time.perf_counter() - start, "ref": ref}

    def sent_logprobs(self, probe_ids: Sequence[int]) -> list[float] | None:
        """Rank 0: the probe's log-probs under the weights this sync sent, from a host model assembled on those
        tensors (no second gather); frees them. None on other ranks."""
        from reasonrl.distributed import deepspeed_engine as ds
        from reasonrl.models.host_copy import model_from_tensors, sequence_logprobs

        if self.rank != 0:
            return None
        if not self.sent:
            raise RuntimeError("sent_probe_logprobs: this sync kept no weights (send_bucket with keep=True first)")
        buffers = {n: b.detach().cpu() for n, b in self.module.named_buffers()}  # never partitioned
        with ds.no_zero3_init():
            model = model_from_tensors(self.module.config, self.sent, buffers, attn_implementation="sdpa")
        self.sent = {}
        return sequence_logprobs(model, list(probe_ids))


# ---------------------------------------------------------------------------------------------- the driver
class WeightSyncer:
    """The weight-sync protocol, run by the driver (the trainer): it orchestrates the policy ranks and the engines;
    the policy ranks never call an engine. One per (policy group, engines); it keeps the bucket plan, the broadcast
    group and the differential probe's calibration across syncs.

    One :meth:`sync`::

        for bucket in plan_buckets(param sizes):           # never splitting a decoder layer
            broadcast:    engines: receive_weights(layout)  ||  policy ranks: gather to rank 0, rank 0 broadcasts
            object_store: policy ranks: gather, rank 0 ray.put  ->  engines: load_packed(layout, ref)
            (an engine loads bucket k while the policy gathers bucket k+1)
        verify: every engine's probe log-probs vs the trainer's (sent_weights: rank 0's host model on the weights
                it sent; trainer_forward: the training model's forward), DifferentialProbe -> WeightSyncError

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
    ):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        if verify_with not in VERIFY_SOURCES:
            raise ValueError(f"verify_with must be one of {VERIFY_SOURCES}, got {verify_with!r}")
        self.policy, self.engines = policy, list(engines)
        self.bucket_bytes, self.tol, self.exact = bucket_bytes, tol, exact
        self.transport, self.verify_with = transport, verify_with
        self.backend = "nccl" if device == "gpu" else "gloo"
        self.timeout_s = timeout_s
        self.probe: DifferentialProbe | None = None
        self.buckets: list[list[str]] | None = None
        self.layouts: list[list[tuple[str, tuple[int, ...], str]]] = []
        self.num_tensors = self.num_bytes = 0
        self.joined = False

    def run(self, probe_ids: Sequence[int] | None) -> SyncReport:
        """:meth:`sync` from synchronous code (scripts, tests); not inside a running event loop."""
        import asyncio

        return asyncio.run(self.sync(probe_ids))

    async def sync(self, probe_ids: Sequence[int] | None) -> SyncReport:
        """Send the policy's current weights to every engine, then verify them (raises WeightSyncError)."""
        await self._plan()
        if self.transport == "broadcast" and not self.joined:
            await self._join()
        keep = probe_ids is not None and self.verify_with == "sent_weights"
        start, gather_s, loads = time.perf_counter(), 0.0, []
        for k, (names, layout) in enumerate(zip(self.buckets, self.layouts, strict=True)):
            _raise_failed(loads)  # an engine that failed to load a bucket stops the sync here
            if self.transport == "broadcast":
                loads += [engine.receive_weights.remote(layout) for engine in self.engines]
                sent = await gather_all(self.policy.call_async("send_bucket", names, "broadcast", keep, k == 0))
            else:
                sent = await gather_all(self.policy.call_async("send_bucket", names, "object_store", keep, k == 0))
                await gather_all(loads)  # at most one bucket in flight per engine
                loads = [engine.load_packed.remote(layout, sent[0]["ref"][0]) for engine in self.engines]
            gather_s += sent[0]["gather_s"]
        await gather_all(loads)
        load_s = time.perf_counter() - start - gather_s
        verify_s, worst = 0.0, float("nan")
        if probe_ids is not None:
            start = time.perf_counter()
            worst = await self._verify(list(probe_ids))
            verify_s = time.perf_counter() - start
        return SyncReport(self.num_tensors, len(self.buckets), self.num_bytes, gather_s, load_s, verify_s, worst)

    async def _plan(self) -> None:
        if self.buckets is not None:
            return
        layout = await self.policy.actors[0].sync_layout.remote()
        by_name = {name: (name, shape, dtype) for name, shape, dtype in layout}
        sizes = [(name, sync_group.numel(shape) * _itemsize(dtype)) for name, shape, dtype in layout]
        self.buckets = plan_buckets(sizes, self.bucket_bytes)
        self.num_tensors, self.num_bytes = len(sizes), sum(size for _, size in sizes)
        self.layouts = [[by_name[n] for n in names] for names in self.buckets]

    async def _join(self) -> None:
        """The broadcast group: policy rank 0 (root, on its node's address) and every worker of every engine."""
        address, port = await self.policy.actors[0].master_address.remote()
        workers = await gather_all([engine.num_workers.remote() for engine in self.engines])
        world_size = 1 + sum(workers)
        joins, first_rank = [], 1
        for engine, count in zip(self.engines, workers, strict=True):
            joins.append(engine.join_weight_group.remote(address, port, first_rank, world_size, self.backend))
            first_rank += count
        joins.append(self.policy.actors[0].join_weight_group.remote(address, port, world_size, self.timeout_s))
        await gather_all(joins)
        self.joined = True

    async def _verify(self, probe_ids: list[int]) -> float:
        first = self.probe is None
        engine_refs = [engine.prompt_logprobs.remote(probe_ids) for engine in self.engines]
        repeat_refs = [engine.prompt_logprobs.remote(probe_ids) for engine in self.engines] if first else None
        if self.verify_with == "sent_weights":  # rank 0 only; the engines score the probe meanwhile
            trainer = await self.policy.actors[0].sent_probe_logprobs.remote(probe_ids)
        else:  # collective: every rank
            trainer = (await gather_all(self.policy.call_async("probe_logprobs", probe_ids)))[0]
        if self.probe is None:  # bf16: verify the change across each sync (kernel noise exceeds one step's move)
            self.probe = DifferentialProbe(tol=self.tol, exact=self.exact)
        repeat = await gather_all(repeat_refs) if repeat_refs is not None else None
        return self.probe.check(await gather_all(engine_refs), trainer, engine_repeat=repeat)


def _raise_failed(refs: Sequence) -> None:
    """Raise the error of any finished ref (an engine that failed to load); leaves the unfinished ones."""
    import ray

    if refs:
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        ray.get(done)


def _itemsize(dtype: str) -> int:
    import torch

    return getattr(torch, dtype).itemsize

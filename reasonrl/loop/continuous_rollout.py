"""Fully asynchronous rollouts (``fully_async``, split placement): the engines never wait for the trainer.

Timeline (docs/async.md)::

    engines:  |== generate continuously: prompts flow in as admission allows, finished groups go to the buffer ==|
                         ^ pause | load | probe | resume (a sync: requests in flight kept or recomputed)
    trainer:  | wait for B groups | forward | advantages | update | sync |  take B groups | ...

Admission (the staleness bound, and one step of work ahead). With the engines holding weight version v (training
steps synced into them; v0 the version the flow started at, a resumed run's step), a prompt group is started only
while ``started <= (v - v0 + k + 1) * B + replaced`` (B = ``rollout_batch_size`` groups per step, k =
``async_staleness``, ``replaced`` = groups dropped so far, whose places refill). At most ``(k + 1) * B`` groups are
then ahead of training, so a group started at version v is normally trained by step v + k + 1, with weights at most
k versions newer than its oldest token. And no group starts while a whole step's batch is already scored and
waiting (ready groups plus groups started on the current weights: one step's batch at most, two while the trainer
waits for its batch): when generation outpaces training the engines stay one step ahead (data one version old),
not k, and a straggler never holds the trainer. A group
whose oldest token would still be more than k versions old when the trainer takes it (a long-tail response that
stayed in flight) is dropped and counted (``async/dropped_stale``), never trained.

Every response token carries the version that sampled it (``Completion.token_versions``), and the engines' per-token
log-probs are the behaviour policy of decoupled PPO (docs/algorithms.md): the loss needs no other change.

Nothing lost, nothing twice. Each prompt drawn gets an *ordinal* (its place in the sampler's order since the run's
first step); it ends trained, or dropped (``stale``, or ``filtered`` by dynamic sampling), and the counts are logged.
A checkpoint stores the sampler state before the oldest prompt not ended yet plus the ordinals after it that have
ended; a resumed run draws the same prompts again from there, skips those, and generates the rest with its own
weights (in-flight samples are dropped, their prompts drawn again: resume is deterministic, not bit-exact).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import deque
from typing import Any

import torch

from reasonrl import algos
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.flow_requests import FlowRequest
from reasonrl.loop.rollout import Rollout, RolloutSample, RolloutSettings, rollout_metrics
from reasonrl.rewards.shaping import final_reward
from reasonrl.utils.rng import derive_seed


@dataclasses.dataclass
class FlowGroup:
    """One prompt's ``n`` samples in the flow."""

    ordinal: int
    row: dict
    prompt_ids: list[int]
    engine: int
    version: int = 0  # the engines' weight version when it started
    completions: dict[int, Completion] = dataclasses.field(default_factory=dict)
    results: list | None = None


@dataclasses.dataclass
class FlowCounts:
    """Prompt groups by fate (cumulative): every drawn group is in exactly one of these, or still in the flow."""

    drawn: int = 0
    trained: int = 0
    dropped_stale: int = 0
    dropped_filtered: int = 0
    kept_at_sync: int = 0  # requests in flight at a sync, per fate
    recomputed_at_sync: int = 0


class ContinuousRollouts:
    """The fully asynchronous rollout service (see the module docstring).

    Args:
        generator: the run's ``Generator`` (engines, prompt encoding, the serialised scorer, the reward model).
        settings: the rollout's config values (``n_samples_per_prompt``, ``rollout_batch_size``, temperature, ...).
        sampler: the trainer's ``PromptSampler``; drawn here, a batch of B prompts at a time.
        staleness: k >= 1. partial_rollout: ``keep`` or ``recompute``.
        resume: a checkpoint's sampler state (with this module's ``flow_first`` / ``flow_skip``), or None.
        max_wait_s: the longest one engine call steps before returning (the pause latency of a sync).
    """

    def __init__(
        self,
        generator,
        settings: RolloutSettings,
        sampler,
        *,
        staleness: int,
        partial_rollout: str,
        resume: dict | None = None,
        max_wait_s: float = 0.05,
    ):
        if staleness < 1:
            raise ValueError(f"fully asynchronous rollouts need async_staleness >= 1, got {staleness}")
        self.generator, self.settings, self.sampler = generator, settings, sampler
        self.staleness, self.partial_rollout, self.max_wait_s = staleness, partial_rollout, max_wait_s
        self.engines = generator.engines
        self.version = self.start_version = 0
        self.counts = FlowCounts()
        self.queued: deque[tuple[int, dict]] = deque()  # drawn, not started: (ordinal, row)
        self.batches: list[tuple[int, dict]] = []  # (first ordinal, sampler state before it) of each draw
        self.next_ordinal = 0
        self.skip: set[int] = set()
        self.ended: set[int] = set()  # ordinals trained or dropped (pruned below the oldest open one)
        self.started = 0  # groups started (admitted)
        self.groups: dict[int, FlowGroup] = {}  # started, not scored yet
        self.ready: list[FlowGroup] = []  # scored, waiting for the trainer
        self.in_flight = [0] * len(self.engines)  # samples per engine
        self.outbox: list[list[FlowRequest]] = [[] for _ in self.engines]
        self.busy_s = [0.0] * len(self.engines)
        self.tasks: list[asyncio.Task] = []
        self.scoring: set[asyncio.Task] = set()
        self.failure: BaseException | None = None
        self.closing = False
        self.exhausted = False
        self.trainer_waiting = False  # inside take(), waiting for the batch
        self._resume = asyncio.Event()
        self._changed = asyncio.Event()  # ready groups, a failure, a drop: the trainer looks again
        self._work = [asyncio.Event() for _ in self.engines]
        self._in_call = [False] * len(self.engines)
        self._idle_calls = asyncio.Condition()
        self._window_start = time.perf_counter()
        self._busy_at_window = [0.0] * len(self.engines)
        if resume is not None and "flow_first" in resume:
            self.next_ordinal = int(resume["flow_first"])
            self.skip = {self.next_ordinal + int(s) for s in resume.get("flow_skip", [])}

    # ------------------------------------------------------------------ lifecycle
    async def start(self, version: int) -> None:
        """Start one request pump per engine; the engines hold weight ``version`` (the trained steps: a resumed
        run's) from now on, and admission counts from it."""
        await asyncio.gather(*[engine.flow_set_version(version, self.partial_rollout) for engine in self.engines])
        self.version = self.start_version = version
        self._resume.set()
        self.admit()
        self.tasks = [asyncio.ensure_future(self._pump(e)) for e in range(len(self.engines))]

    async def close(self) -> None:
        """Stop the pumps and abort what is in flight (a stop or the end of the run; those prompts are not
        trained: a checkpoint's resume state draws them again)."""
        if self.closing:
            return
        self.closing = True
        self._resume.set()
        for event in self._work:
            event.set()
        for task in [*self.tasks, *self.scoring]:
            task.cancel()
        for task in [*self.tasks, *self.scoring]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await asyncio.gather(*[engine.flow_abort() for engine in self.engines], return_exceptions=True)

    # ------------------------------------------------------------------ admission
    def allowed(self) -> int:
        """How many groups may have been started at the engines' current version (module docstring)."""
        replaced = self.counts.dropped_stale + self.counts.dropped_filtered
        syncs = self.version - self.start_version  # this flow's syncs (a resumed run starts at its step)
        return (syncs + self.staleness + 1) * self.settings.rollout_batch_size + replaced

    def _draw(self) -> bool:
        """Queue the sampler's next batch (ordinals in order; those a resumed run already ended skipped)."""
        state = self.sampler.state_dict()
        rows = self.sampler.next_batch()
        if rows is None:
            self.exhausted = True
            return False
        self.batches.append((self.next_ordinal, state))
        for row in rows:
            if self.next_ordinal not in self.skip:
                self.queued.append((self.next_ordinal, row))
                self.counts.drawn += 1
            self.next_ordinal += 1
        return True

    def admit(self) -> None:
        """Start queued groups while admission allows, each on the engine with the fewest samples in flight.

        Two bounds: the staleness bound (:meth:`allowed`), and the work ahead (:meth:`has_room`)."""
        s = self.settings
        while self.started < self.allowed() and self.has_room():
            if not self.queued and (self.exhausted or not self._draw()):
                return
            if not self.queued:
                continue
            ordinal, row = self.queued.popleft()
            (prompt_ids,) = self.generator.encode([row])
            engine = min(range(len(self.engines)), key=lambda e: self.in_flight[e])
            group = FlowGroup(ordinal, row, prompt_ids, engine, version=self.version)
            self.groups[ordinal] = group
            self.started += 1
            for j in range(s.n_samples_per_prompt):
                sampling = self.generator.flow_sampling(s.temperature, derive_seed(s.seed, "flow", ordinal, j), row)
                self.outbox[engine].append(FlowRequest(f"{ordinal}/{j}", prompt_ids, sampling))
            self.in_flight[engine] += s.n_samples_per_prompt
            self._work[engine].set()

    def has_room(self) -> bool:
        """Whether the work ahead of the trainer leaves room for another group: the ready groups plus those started
        on the current weights stay under one step's batch (the next one, generated while the trainer trains).
        Groups still in flight from older versions (the long tail) do not count, and while the trainer waits for its
        batch a second step's worth may start, so a straggler of the current weights does not make the trainer wait
        for it as a synchronous step would. When generation outpaces training, this keeps the
        engines one step ahead (data one version old) instead of k steps ahead (k versions old)."""
        current = sum(g.version == self.version for g in self.groups.values())
        ahead = self.settings.rollout_batch_size * (2 if self.trainer_waiting else 1)
        return len(self.ready) + current < ahead

    # ------------------------------------------------------------------ the pumps
    async def _pump(self, e: int) -> None:
        engine = self.engines[e]
        try:
            while not self.closing:
                await self._resume.wait()
                new, self.outbox[e] = self.outbox[e], []
                if not new and self.in_flight[e] == 0:
                    self._work[e].clear()
                    await self._work[e].wait()
                    continue
                self._in_call[e] = True
                start = time.perf_counter()
                try:
                    finished = await engine.flow_step(new, self.max_wait_s)
                finally:
                    self.busy_s[e] += time.perf_counter() - start
                    self._in_call[e] = False
                    async with self._idle_calls:
                        self._idle_calls.notify_all()
                for key, completion in finished:
                    self._arrived(e, key, completion)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # the trainer raises it at its next take
            self.failure = error
            self._changed.set()

    def _arrived(self, e: int, key: str, completion: Completion) -> None:
        ordinal, j = (int(x) for x in key.split("/"))
        self.in_flight[e] -= 1
        group = self.groups[ordinal]
        completion.sample_index = j
        group.completions[j] = completion
        if len(group.completions) == self.settings.n_samples_per_prompt:
            task = asyncio.ensure_future(self._score(group))
            self.scoring.add(task)
            task.add_done_callback(self.scoring.discard)

    async def _score(self, group: FlowGroup) -> None:
        """Score a finished group (one scorer call at a time, in a thread), then buffer it or drop it (dynamic
        sampling: a group without reward variance)."""
        try:
            completions = [group.completions[j] for j in range(self.settings.n_samples_per_prompt)]
            rows = [group.row] * len(completions)
            results = await asyncio.to_thread(self.generator.score_serialised, completions, rows)
            for r in results:
                final_reward(r)
            await self.generator.add_reward_model_scores(completions, results)
            group.results = results
            del self.groups[group.ordinal]
            if self.settings.dynamic_sampling:
                keep = algos.dynamic_sampling_keep_mask(
                    torch.tensor([float(r.reward) for r in results]), torch.zeros(len(results), dtype=torch.long)
                )
                if not bool(keep.any()):
                    self._end(group.ordinal)
                    self.counts.dropped_filtered += 1
                    self.admit()
                    return
            self.ready.append(group)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            self.failure = error
        self._changed.set()

    # ------------------------------------------------------------------ syncs
    @contextlib.asynccontextmanager
    async def paused(self):
        """No engine step inside the block (a weight sync): every pump parks after its current call, requests
        stay in the engines (paused schedulers on a multiprocess engine)."""
        self._resume.clear()
        async with self._idle_calls:
            await self._idle_calls.wait_for(lambda: not any(self._in_call))
        await asyncio.gather(*[engine.flow_pause() for engine in self.engines])
        try:
            yield
        finally:
            self._resume.set()

    async def synced(self, version: int) -> dict[str, float]:
        """After a sync inside :meth:`paused`: the engines hold ``version``; requests in flight continue under
        ``partial_rollout``; admission widens. Returns the sync's flow metrics."""
        reports = await asyncio.gather(
            *[engine.flow_set_version(version, self.partial_rollout) for engine in self.engines]
        )
        self.version = version
        kept = sum(r["kept"] for r in reports)
        recomputed = sum(r["recomputed"] for r in reports)
        self.counts.kept_at_sync += kept
        self.counts.recomputed_at_sync += recomputed
        self.admit()
        return {"async/kept_requests": float(kept), "async/recomputed_requests": float(recomputed)}

    # ------------------------------------------------------------------ the trainer's side
    def _end(self, ordinal: int) -> None:
        self.ended.add(ordinal)

    def _oldest_version(self, group: FlowGroup) -> int:
        return min(min(c.token_versions or [self.version]) for c in group.completions.values())

    async def take(self, trainer_version: int) -> tuple[Rollout, dict[str, float]] | None:
        """The next step's batch: ``rollout_batch_size`` ready groups (the oldest first), waiting until they are
        there; fewer at the end of the data, None when nothing is left. Groups whose oldest token is more than
        ``staleness`` versions older than ``trainer_version`` (the weights the step trains) are dropped."""
        start = time.perf_counter()
        B = self.settings.rollout_batch_size
        while True:
            if self.failure is not None:
                raise RuntimeError(f"fully asynchronous rollout failed: {self.failure!r}") from self.failure
            for group in [g for g in self.ready if trainer_version - self._oldest_version(g) > self.staleness]:
                self.ready.remove(group)
                self._end(group.ordinal)
                self.counts.dropped_stale += 1
                self.admit()
            if len(self.ready) >= B:
                break
            if self.exhausted and not self.queued and not self.groups:
                break
            self._changed.clear()
            self.trainer_waiting = True
            self.admit()
            try:
                await self._changed.wait()
            finally:
                self.trainer_waiting = False
        if not self.ready:
            return None
        self.ready.sort(key=lambda g: g.ordinal)
        taken, self.ready = self.ready[:B], self.ready[B:]
        batch = Rollout()
        for i, group in enumerate(taken):
            for j, result in enumerate(group.results):
                completion = group.completions[j]
                completion.prompt_index = i
                batch.samples.append(RolloutSample(completion, result, group.row, i))
            self._end(group.ordinal)
            self.counts.trained += 1
        self._prune()
        self.admit()  # the buffer has room again
        waited = time.perf_counter() - start
        return batch, self.metrics(batch, trainer_version, waited)

    def metrics(self, batch: Rollout, trainer_version: int, waited: float) -> dict[str, float]:
        """The step's flow metrics: version lag of its tokens, the counts, the engines' idle share since the last
        step, and the rollout metrics every loop logs."""
        lags = [trainer_version - v for c in batch.completions for v in (c.token_versions or [])]
        oldest = [trainer_version - min(c.token_versions) for c in batch.completions if c.token_versions]
        now = time.perf_counter()
        wall = max(now - self._window_start, 1e-9)
        busy = [b - b0 for b, b0 in zip(self.busy_s, self._busy_at_window, strict=True)]
        self._window_start, self._busy_at_window = now, list(self.busy_s)
        c = self.counts
        tokens = sum(len(x.token_ids) for x in batch.completions)
        m = {
            "time/wait_rollout": waited,
            "time/generate": waited,
            "time/reward": 0.0,
            "async/version_lag_mean": sum(lags) / max(len(lags), 1),
            "async/version_lag_max": float(max(oldest, default=0)),
            "async/staleness": float(max(oldest, default=0)),
            "async/engine_idle_frac": 1.0 - min(1.0, sum(busy) / (wall * len(busy))),
            "async/buffer_groups": float(len(self.ready)),
            "async/groups_drawn": float(c.drawn),
            "async/groups_trained": float(c.trained),
            "async/dropped_stale": float(c.dropped_stale),
            "async/dropped_filtered": float(c.dropped_filtered),
            "perf/tokens_per_s_generate": tokens / wall,
        }
        return m | rollout_metrics(batch.completions, batch.results, self.generator.settings.generate_max_len)

    # ------------------------------------------------------------------ resume
    def _prune(self) -> None:
        """Forget draws and ended ordinals before the batch holding the oldest open prompt (the resume point)."""
        oldest = self.oldest_open()
        while len(self.batches) > 1 and self.batches[1][0] <= oldest:
            self.batches.pop(0)
        first = self.batches[0][0] if self.batches else oldest
        self.ended = {o for o in self.ended if o >= first}

    def oldest_open(self) -> int:
        """The smallest ordinal drawn and not ended (the next one to draw when none is open)."""
        open_ordinals = [o for o, _ in self.queued] + list(self.groups) + [g.ordinal for g in self.ready]
        return min(open_ordinals, default=self.next_ordinal)

    def resume_state(self) -> dict[str, Any]:
        """The sampler state a checkpoint stores (module docstring): before the batch holding the oldest open
        prompt, with ``flow_first`` (that batch's first ordinal) and ``flow_skip`` (ordinals after it that ended,
        relative to ``flow_first``)."""
        oldest = self.oldest_open()
        first, state = next(((f, s) for f, s in reversed(self.batches) if f <= oldest), (None, None))
        if first is None:
            return self.sampler.state_dict() | {"flow_first": self.next_ordinal, "flow_skip": []}
        skip = sorted(o - first for o in self.ended | self.skip if o >= first)
        return dict(state) | {"flow_first": first, "flow_skip": skip}


def account(counts: FlowCounts, in_flow: int) -> bool:
    """True when every drawn group is trained, dropped with a reason, or still in the flow (``in_flow``)."""
    return counts.drawn == counts.trained + counts.dropped_stale + counts.dropped_filtered + in_flow

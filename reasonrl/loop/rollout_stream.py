"""Streaming a rollout: completions are scored as they finish, and the samples the step will train on are handed
on (to the forwards, :mod:`reasonrl.loop.forward_stream`) as soon as it is known that the step keeps them.

Two pieces, both plain asyncio / Python (no Ray, no vLLM; ``Generator`` and ``RolloutCollector`` wire them to the
engines):

* :func:`score_as_they_arrive`: consumes every engine's stream of finished completions and scores them in a worker
  thread, one scorer call at a time, each call taking everything that arrived while the previous call ran.
* :class:`KeptRelease`: decides each prompt group (DAPO dynamic sampling keeps a group iff its rewards differ) as
  soon as all of its samples are in, and releases the kept samples in the rollout's own order.

Order never depends on timing: results are returned in canonical order (prompt index, then sample index), and
``KeptRelease`` releases group ``g`` only after every group before it was decided, so the released sequence is
exactly the rollout's kept list, whatever order the engines finish in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence

from reasonrl.dataplane.completion import Completion

# on_ready(completions, results or None): a part is ready (arrived, or scored; see score_as_they_arrive)
OnReady = Callable[[list[Completion], list | None], None]


@dataclasses.dataclass
class StreamTimes:
    """Wall times of one streamed generate-and-score call (seconds since its start unless said otherwise).

    ``generated``: when the last engine finished. ``scoring_spans``: (begin, end) of every scorer call
    (disjoint: one call at a time)."""

    start: float
    generated: float
    scoring_spans: list[tuple[float, float]]

    @property
    def generate_s(self) -> float:
        return self.generated - self.start

    @property
    def reward_overlapped_s(self) -> float:
        """Scoring seconds that ran while some engine was still generating."""
        return sum(max(0.0, min(end, self.generated) - begin) for begin, end in self.scoring_spans)


async def score_as_they_arrive(
    parts: Sequence[AsyncIterator[list[Completion]]],
    score: Callable[[list[Completion]], list],
    *,
    on_ready: OnReady | None = None,
    ready_when_scored: bool = True,
) -> tuple[list[Completion], list, StreamTimes]:
    """Consume every engine's stream of finished completions; score them as they arrive.

    Args:
        parts: one async iterator per engine, each yielding lists of finished completions (``prompt_index`` already
            counted over the call's whole row list).
        score: ``completions -> results`` (blocking; run in a worker thread). It is called one call at a time; each
            call takes every completion that arrived while the previous call ran.
        on_ready: called on the event loop with each part as soon as it is ready: after it was scored (with its
            results) when ``ready_when_scored``, else as soon as it arrived (results None).

    Returns (completions, results, times): completions and results in canonical order (prompt index, then
    sample index), the same whatever order they arrived in.
    """
    start = time.perf_counter()
    arrived: asyncio.Queue = asyncio.Queue()
    engines_left = len(parts)
    generated = start
    scored: dict[tuple[int, int], tuple[Completion, object]] = {}
    spans: list[tuple[float, float]] = []
    done = object()  # queued once by the last engine to finish

    async def drain(stream: AsyncIterator[list[Completion]]) -> None:
        nonlocal engines_left, generated
        async for part in stream:
            if not part:
                continue
            if on_ready is not None and not ready_when_scored:
                on_ready(list(part), None)
            arrived.put_nowait(list(part))
        engines_left -= 1
        if engines_left == 0:
            generated = time.perf_counter()
            arrived.put_nowait(done)

    async def scorer() -> None:
        finished = False
        while not finished:
            batch: list[Completion] = []
            item = await arrived.get()
            while True:  # everything that arrived meanwhile goes into this call
                if item is done:
                    finished = True
                else:
                    batch += item
                if arrived.empty():
                    break
                item = arrived.get_nowait()
            if not batch:
                continue
            begin = time.perf_counter()
            results = list(await asyncio.to_thread(score, batch))
            spans.append((begin, time.perf_counter()))
            if len(results) != len(batch):
                raise ValueError(f"the scorer returned {len(results)} results for {len(batch)} completions")
            for c, r in zip(batch, results, strict=True):
                scored[(c.prompt_index, c.sample_index)] = (c, r)
            if on_ready is not None and ready_when_scored:
                on_ready(batch, results)

    if not parts:
        return [], [], StreamTimes(start, start, [])
    tasks = [asyncio.ensure_future(drain(stream)) for stream in parts] + [asyncio.ensure_future(scorer())]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # one failed (or we were cancelled): stop the others
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    ordered = [scored[key] for key in sorted(scored)]
    times = StreamTimes(start, generated, spans)
    return [c for c, _ in ordered], [r for _, r in ordered], times


class KeptRelease:
    """Releases the samples a rollout keeps, in the rollout's order, as soon as their groups are decided.

    The rollout's kept list is: for every try (dynamic-sampling refills are further tries), the prompt groups in
    prompt order, each group's samples in sample order; a group is kept whole or dropped (DAPO: dropped when all its
    final rewards are equal), and the list is cut at ``target`` samples. Group ``g`` of a try is released once all
    ``n`` of its samples are in and every group before it was released or dropped.

    Args:
        n: samples per prompt.
        target: the most samples a step trains on (``rollout_batch_size * n_samples_per_prompt``).
        keep_group: ``rewards of one group -> keep?``; None keeps every group (no rewards needed: samples may be
            added unscored).
        sink: receives each released run of samples (a list of completions, in order).
    """

    def __init__(
        self,
        n: int,
        target: int,
        keep_group: Callable[[list[float]], bool] | None,
        sink: Callable[[list[Completion]], None],
    ):
        self.n, self.target, self.keep_group, self.sink = n, target, keep_group, sink
        self.released: list[Completion] = []
        self._groups: list[dict[int, tuple[Completion, float | None]]] = []
        self._next = 0

    def start_try(self, num_prompts: int) -> None:
        """A new try over ``num_prompts`` prompts; its completions' ``prompt_index`` counts from 0."""
        if self._next < len(self._groups):
            raise RuntimeError(f"KeptRelease: a new try while group {self._next} of the last one is undecided")
        self._groups = [{} for _ in range(num_prompts)]
        self._next = 0

    def add(self, completions: Sequence[Completion], results: Sequence | None = None) -> None:
        """Record samples of the current try (with their results' final ``reward`` when groups need rewards) and
        release what became decided."""
        if self.keep_group is not None and results is None:
            raise ValueError("KeptRelease: dynamic sampling decides groups by reward; add the samples with results")
        for i, c in enumerate(completions):
            reward = None if results is None else float(results[i].reward)
            self._groups[c.prompt_index][c.sample_index] = (c, reward)
        while self._next < len(self._groups) and len(self._groups[self._next]) == self.n:
            group = [self._groups[self._next][j] for j in range(self.n)]
            self._next += 1
            room = self.target - len(self.released)
            if room <= 0 or (self.keep_group is not None and not self.keep_group([r for _, r in group])):
                continue
            run = [c for c, _ in group][:room]
            self.released += run
            self.sink(run)

"""Bounded-staleness asynchronous rollouts (``async_staleness=k`` under split placement): while the trainers
update on step n, the engines already generate the rollouts of steps n+1 .. n+k with the weights they hold.

Bookkeeping. A rollout's *version* is the number of training steps whose updates the engines held when it was
launched (``PPOTrainer.global_step`` then: every step ends with its weight sync). The rollout of step s (1-based)
is launched when step s-k starts, and the engines run calls in arrival order, so it is generated with the weights
of version v >= s-1-k, and every weight sync that arrives later waits for it. Step s trains with version s-1, so
its data is ``s-1-v <= k`` updates old (logged as ``async/staleness``); the gap between the policy that sampled
and the one that trains is what ``rollout_correction`` corrects.

Prompts are drawn from the sampler in step order when a rollout is launched; each pending rollout keeps the
sampler's state from before its draw, so a checkpoint (or a stop that abandons a step) stores the state of the
oldest rollout not trained yet: a resumed run draws those prompts again and generates them with its current
weights (resume is exact for k = 0 only).

``k = 0`` never builds a ``RolloutAhead``: the trainer generates each step's rollout itself, as the synchronous
loop always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

# launch(rows, seed_step) -> (the rollout of those rows, its metrics)
Launch = Callable[[list[dict], int], Awaitable[tuple[Any, dict[str, float]]]]


@dataclasses.dataclass
class PendingRollout:
    """One launched rollout: the step that will train on it, its task (-> rollout, metrics), and bookkeeping."""

    step: int  # 1-based training step that consumes it
    task: asyncio.Future
    sampler_state: dict  # the sampler before this rollout's prompts were drawn
    version: int  # training steps whose weights the engines held at launch


class RolloutAhead:
    """Keeps the rollouts of the current step and the next ``staleness`` steps launched (see the module docstring).

    Args:
        staleness: k >= 1, how many steps generation may run ahead of training.
        launch: starts one step's rollout (``RolloutCollector.collect`` with the seed of ``seed_step``).
        sampler: the trainer's ``PromptSampler`` (``next_batch``, ``state_dict``, ``load_state_dict``).
        total_steps: the run's last step (nothing is launched beyond it).
    """

    def __init__(self, staleness: int, launch: Launch, sampler, total_steps: int):
        if staleness < 1:
            raise ValueError(f"RolloutAhead needs staleness >= 1 (0 is the synchronous loop), got {staleness}")
        self.staleness, self.launch, self.sampler, self.total_steps = staleness, launch, sampler, total_steps
        self.pending: deque[PendingRollout] = deque()

    def fill(self, step: int, version: int) -> None:
        """At the start of ``step``: launch the rollouts of steps up to ``step + staleness`` not launched yet (at
        most ``total_steps``; fewer when the sampler runs out), each recorded at weight ``version``."""
        while len(self.pending) <= self.staleness:
            next_step = self.pending[-1].step + 1 if self.pending else step
            if next_step > self.total_steps:
                return
            state = self.sampler.state_dict()
            rows = self.sampler.next_batch()
            if rows is None:
                return
            task = asyncio.ensure_future(self.launch(rows, next_step - 1))  # seeds as the synchronous loop
            self.pending.append(PendingRollout(next_step, task, state, version))

    async def take(self, step: int) -> tuple[Any, dict[str, float], PendingRollout] | None:
        """The rollout of ``step`` (waiting for it), its metrics plus ``time/wait_rollout`` (how long training
        waited for generation), and its record; None when no rollout is left (data used up)."""
        if not self.pending:
            return None
        item = self.pending.popleft()
        if item.step != step:
            raise RuntimeError(f"rollout of step {item.step} pending, but step {step} asked for one")
        start = time.perf_counter()
        batch, metrics = await item.task
        return batch, metrics | {"time/wait_rollout": time.perf_counter() - start}, item

    def resume_state(self) -> dict | None:
        """The sampler state a checkpoint stores: from before the oldest rollout not trained yet (None: none is
        pending, the sampler's own state is right)."""
        return self.pending[0].sampler_state if self.pending else None

    async def drop(self) -> None:
        """Cancel every pending rollout and put their prompts back in the sampler (the oldest one's state)."""
        state = self.resume_state()
        while self.pending:
            item = self.pending.pop()
            item.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # its error does not matter any more
                await item.task
        if state is not None:
            self.sampler.load_state_dict(state)

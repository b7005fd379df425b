"""Bounded-staleness bookkeeping of asynchronous rollouts (``RolloutAhead``) with the real ``PromptSampler`` and a
stand-in for the engines (a coroutine that records what it was asked to generate): launch order, seeds, staleness,
the sampler state a checkpoint stores, and what a stop puts back."""

from __future__ import annotations

import asyncio

import pytest

from reasonrl.data.sampler import PromptSampler
from reasonrl.loop.rollout_ahead import RolloutAhead

ROWS = [{"id": i, "question": f"q{i}", "answer": str(i)} for i in range(12)]


class FakeEngines:
    """``launch(rows, seed_step)``: returns the prompt ids and metrics after a short wait, records every call."""

    def __init__(self):
        self.calls: list[tuple[int, list[int]]] = []  # (seed_step, ids) in launch order

    async def launch(self, rows, seed_step):
        self.calls.append((seed_step, [r["id"] for r in rows]))
        await asyncio.sleep(0.01)
        return [r["id"] for r in rows], {"time/generate": 0.01}


def run_loop(staleness: int, steps: int) -> tuple[list[float], list[list[int]], FakeEngines, list[list[int]]]:
    """A trainer's loop: at step s, fill then take (version = completed steps). Returns the staleness of each step,
    the rows each step trained on, the engines and what a synchronous sampler would have given."""
    sampler = PromptSampler(ROWS, 3, seed=0, num_episodes=2)
    reference = PromptSampler(ROWS, 3, seed=0, num_episodes=2)
    engines = FakeEngines()
    ahead = RolloutAhead(staleness, engines.launch, sampler, total_steps=steps)

    async def loop():
        staleness_of, trained = [], []
        for step in range(1, steps + 1):
            ahead.fill(step, version=step - 1)
            assert len(ahead.pending) <= staleness + 1
            batch, metrics, record = await ahead.take(step)
            assert metrics["time/generate"] == 0.01 and metrics["time/wait_rollout"] >= 0
            staleness_of.append(step - 1 - record.version)
            trained.append(batch)
        assert await ahead.take(steps + 1) is None  # nothing launched beyond the run
        return staleness_of, trained

    staleness_of, trained = asyncio.run(loop())
    return staleness_of, trained, engines, [[r["id"] for r in reference.next_batch()] for _ in range(steps)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_each_step_trains_on_the_synchronous_prompts_at_most_k_updates_old(k):
    staleness_of, trained, engines, synchronous = run_loop(k, steps=6)
    assert staleness_of == [min(s, k) for s in range(6)]  # step 1 has nothing older than the start
    assert trained == synchronous  # the same prompts, in the same order, as the synchronous loop
    assert [seed_step for seed_step, _ in engines.calls] == list(range(6))  # the synchronous loop's seeds


def test_checkpoint_state_and_drop_put_the_prompts_of_untrained_rollouts_back():
    sampler = PromptSampler(ROWS, 3, seed=0, num_episodes=1)
    reference = PromptSampler(ROWS, 3, seed=0, num_episodes=1)
    engines = FakeEngines()
    ahead = RolloutAhead(2, engines.launch, sampler, total_steps=4)

    async def two_steps_then_stop():
        ahead.fill(1, version=0)
        await ahead.take(1)
        ahead.fill(2, version=1)  # steps 2, 3, 4 launched; the sampler is used up
        assert [p.step for p in ahead.pending] == [2, 3, 4] and sampler.next_batch() is None
        await ahead.take(2)
        saved = ahead.resume_state()  # what a checkpoint after step 2 stores: before step 3's prompts
        await ahead.drop()
        return saved

    saved = asyncio.run(two_steps_then_stop())
    reference.next_batch(), reference.next_batch()
    assert saved == reference.state_dict() == sampler.state_dict()
    assert not ahead.pending and ahead.resume_state() is None
    assert [r["id"] for r in sampler.next_batch()] == [r["id"] for r in reference.next_batch()]  # step 3's prompts


def test_drop_cancels_rollouts_still_generating():
    async def scenario():
        gate = asyncio.Event()

        async def launch(rows, seed_step):
            await gate.wait()  # never set: the engines are still busy
            return rows, {}

        ahead = RolloutAhead(1, launch, PromptSampler(ROWS, 3, seed=0), total_steps=4)
        ahead.fill(1, version=0)
        tasks = [p.task for p in ahead.pending]
        await asyncio.sleep(0)
        await ahead.drop()
        return tasks

    tasks = asyncio.run(scenario())
    assert len(tasks) == 2 and all(t.cancelled() for t in tasks)


def test_staleness_zero_is_the_synchronous_loop_and_never_built():
    with pytest.raises(ValueError, match="staleness >= 1"):
        RolloutAhead(0, FakeEngines().launch, PromptSampler(ROWS, 3, seed=0), total_steps=2)

"""``reasonrl.loop.rollout_stream``: scoring completions as they arrive, and releasing the kept samples in the rollout's
order as soon as their prompt groups are decided. Plain asyncio: the engines are async generators here;
tests/loop/test_trainer_split_placement.py and test_trainer_features.py run the same code on real Ray + vLLM
engines."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from types import SimpleNamespace

import pytest

from reasonrl.dataplane.completion import Completion
from reasonrl.loop.rollout import _group_has_signal
from reasonrl.loop.rollout_stream import KeptRelease, score_as_they_arrive


def completion(p: int, k: int) -> Completion:
    return Completion(
        prompt_index=p, sample_index=k, prompt_token_ids=[p], token_ids=[k], text=f"{p}:{k}", finish_reason="stop"
    )


def result(reward: float):
    return SimpleNamespace(reward=reward)


async def engine(parts: list[list[Completion]], delay_s: float = 0.01):
    for part in parts:
        await asyncio.sleep(delay_s)
        yield part


def test_results_come_back_in_canonical_order_whatever_the_arrival_order():
    samples = [completion(p, k) for p in range(4) for k in range(3)]
    shuffled = samples[:]
    random.Random(0).shuffle(shuffled)
    streams = [engine([[c] for c in shuffled[:6]]), engine([[c] for c in shuffled[6:]], delay_s=0.003)]

    def score(batch):
        return [result(c.prompt_index * 10 + c.sample_index) for c in batch]

    completions, results, times = asyncio.run(score_as_they_arrive(streams, score))
    assert [(c.prompt_index, c.sample_index) for c in completions] == [(p, k) for p in range(4) for k in range(3)]
    assert [r.reward for r in results] == [p * 10 + k for p in range(4) for k in range(3)]
    assert times.generated >= times.start and times.scoring_spans[-1][1] >= times.generated  # last: scored after


def test_scoring_starts_before_the_last_engine_finishes_and_batches_what_arrived_meanwhile():
    first_scored = threading.Event()
    calls: list[int] = []

    async def late_engine():
        await asyncio.to_thread(first_scored.wait, 5.0)  # finishes only once something was scored
        yield [completion(9, 0)]

    def score(batch):
        calls.append(len(batch))
        time.sleep(0.05)  # while this call runs, the fast engine's later parts pile up
        first_scored.set()
        return [result(1.0) for _ in batch]

    fast = engine([[completion(p, 0)] for p in range(5)], delay_s=0.005)
    start = time.perf_counter()
    completions, _, times = asyncio.run(score_as_they_arrive([fast, late_engine()], score))
    assert time.perf_counter() - start < 5.0  # the late engine was released by the first scorer call
    assert len(completions) == 6
    assert calls[0] == 1  # the first completion alone
    assert len(calls) < 6  # later calls took several completions each
    assert times.reward_overlapped_s > 0.0


def test_on_ready_gets_parts_on_arrival_or_after_scoring():
    arrived, scored = [], []
    streams = [engine([[completion(0, 0)], [completion(0, 1)]])]
    on_arrival = dict(on_ready=lambda c, r: arrived.append(r), ready_when_scored=False)
    asyncio.run(score_as_they_arrive(streams, lambda b: [result(2.0) for _ in b], **on_arrival))
    assert arrived == [None, None]
    streams = [engine([[completion(0, 0), completion(0, 1)]])]
    asyncio.run(
        score_as_they_arrive(streams, lambda b: [result(2.0) for _ in b], on_ready=lambda c, r: scored.append(r))
    )
    assert [[x.reward for x in r] for r in scored] == [[2.0, 2.0]]


def test_a_failing_engine_stops_the_call_and_a_wrong_result_count_is_refused():
    async def broken():
        yield [completion(0, 0)]
        raise RuntimeError("engine died")

    with pytest.raises(RuntimeError, match="engine died"):
        asyncio.run(score_as_they_arrive([broken(), engine([[completion(1, 0)]] * 3, delay_s=0.5)], lambda b: []))
    with pytest.raises(ValueError, match="returned 0 results for 1 completions"):
        asyncio.run(score_as_they_arrive([engine([[completion(0, 0)]])], lambda b: []))
    completions, results, times = asyncio.run(score_as_they_arrive([], lambda b: []))  # no engine got prompts
    assert completions == results == [] and times.generate_s == 0.0 and times.reward_overlapped_s == 0.0


def _release(n: int, target: int, dynamic: bool):
    runs: list[list[Completion]] = []
    release = KeptRelease(n, target, _group_has_signal if dynamic else None, runs.append)
    return release, runs


def test_release_without_dynamic_sampling_follows_prompt_order_as_groups_complete():
    release, runs = _release(n=2, target=6, dynamic=False)
    release.start_try(3)
    release.add([completion(1, 0), completion(1, 1)])  # group 1 complete, group 0 not: nothing yet
    assert runs == []
    release.add([completion(0, 1)])
    assert runs == []
    release.add([completion(0, 0)])  # group 0 completes: groups 0 and 1 go, in order
    assert [[(c.prompt_index, c.sample_index) for c in run] for run in runs] == [[(0, 0), (0, 1)], [(1, 0), (1, 1)]]
    release.add([completion(2, 1), completion(2, 0)])
    assert [(c.prompt_index, c.sample_index) for c in release.released] == [(p, k) for p in range(3) for k in range(2)]


def test_release_with_dynamic_sampling_drops_flat_groups_refills_and_cuts_at_target():
    release, runs = _release(n=2, target=3, dynamic=True)
    release.start_try(3)
    with pytest.raises(ValueError, match="with results"):
        release.add([completion(0, 0)])
    # group 0: rewards 1, 1 (flat: dropped); group 1: 0, 1 (kept); group 2: 1, 1 (dropped)
    release.add([completion(1, 0), completion(1, 1)], [result(0.0), result(1.0)])
    assert runs == []  # group 0 undecided
    release.add([completion(0, 0), completion(0, 1)], [result(1.0), result(1.0)])
    assert [(c.prompt_index, c.sample_index) for c in release.released] == [(1, 0), (1, 1)]
    with pytest.raises(RuntimeError, match="undecided"):
        release.start_try(2)
    release.add([completion(2, 0), completion(2, 1)], [result(1.0), result(1.0)])
    release.start_try(2)  # a refill: two more prompts, room for one more sample
    release.add([completion(0, 0), completion(0, 1)], [result(0.0), result(0.5)])
    assert len(release.released) == 3 and release.released[-1].prompt_index == 0
    release.add([completion(1, 0), completion(1, 1)], [result(0.0), result(0.5)])  # past the target: nothing
    assert len(release.released) == 3 and sum(len(r) for r in runs) == 3


def test_group_signal_is_dynamic_samplings_decision():
    assert not _group_has_signal([1.0, 1.0, 1.0])
    assert _group_has_signal([1.0, 0.0, 1.0])
    assert not _group_has_signal([0.0])

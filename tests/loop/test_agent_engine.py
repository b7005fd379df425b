"""Agent rollouts on a real vLLM engine actor and the real gateway (HTTP, the ``openai`` client): every trained token
of an agent sample is a token the engine sampled, with its log-prob, in the context the trainer will see; forks
train the last piece; the gateway starts with the rollout and stops with the generator.

The tiny model is random, so its turns are ended by a stop string (" "), as in tests/loop/test_multi_turn.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest
import ray

from reasonrl.agents import AgentResult
from reasonrl.agents.agent_fn import AgentFunction
from reasonrl.agents.gateway.backend import SamplingLimits
from reasonrl.data.templates import get_template
from reasonrl.distributed.vllm_engine import SamplingConfig
from reasonrl.loop.agent_rollout import AgentSettings
from reasonrl.loop.generation import GenerationSettings, Generator
from reasonrl.rewards import RewardResult
from reasonrl.utils.rng import derive_seed

pytestmark = pytest.mark.integration
ROWS = [{"question": f"What is {i} + {i}?", "answer": str(2 * i), "id": i} for i in range(3)]
N = 2
SEED = 5
BUDGET = 48


async def three_turns(row, endpoint):
    """A plain openai tool-less loop: ask, read the reply, say "go on", twice more."""
    from openai import AsyncOpenAI

    messages = [{"role": "user", "content": row["question"]}]
    async with AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0) as client:
        for _ in range(3):
            reply = await client.chat.completions.create(model=endpoint.model, messages=messages)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
            if reply.choices[0].finish_reason == "length":
                break
            messages.append({"role": "user", "content": "go on"})
    return AgentResult(reward=0.5)


async def forgetful(row, endpoint):
    """Rewrites its history after the first turn (drops the model's reply): the session forks."""
    from openai import AsyncOpenAI

    first = [{"role": "user", "content": row["question"]}]
    async with AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0) as client:
        await client.chat.completions.create(model=endpoint.model, messages=first)
        await client.chat.completions.create(model=endpoint.model, messages=[{"role": "user", "content": "again?"}])
    return None


def scorer(completions, rows):
    return [RewardResult(reward=1.0, correct=True, reason="correct") for _ in completions]


def generator(engine, tokenizer, agent) -> Generator:
    limits = SamplingLimits(temperature=1.0, top_p=1.0, max_tokens=BUDGET, max_prompt_tokens=64)
    agents = AgentSettings(AgentFunction(agent, "test", True), limits, concurrency=4, timeout_s=60.0)
    settings = GenerationSettings(
        max_prompt_len=64, generate_max_len=BUDGET, stop=(" ",), include_stop_str_in_output=True, agents=agents
    )
    template = get_template("chat", tokenizer=tokenizer)
    return Generator([engine], tokenizer=tokenizer, template=template, scorer=scorer, settings=settings)


async def generate(gen: Generator):
    try:
        return await gen.generate_and_score(ROWS, n=N, temperature=1.0, seed=SEED, logprobs=True)
    finally:
        await gen.aclose()


def test_every_trained_token_is_the_engines_with_its_logprob(vllm_engine, tiny_tokenizer):
    gen = generator(vllm_engine, tiny_tokenizer, three_turns)
    scored = asyncio.run(generate(gen))
    assert [(c.prompt_index, c.sample_index) for c in scored.completions] == [
        (p, s) for p in range(len(ROWS)) for s in range(N)
    ]
    assert gen.agents._gateway is None  # stopped by aclose
    times = scored.env_times
    assert times.sessions == len(ROWS) * N and times.errors == times.timeouts == times.no_requests == 0
    engine_seed = derive_seed(SEED, 0)  # engine 0's seed (Generator.start_generation)
    checked = 0
    for c, result in zip(scored.completions, scored.results, strict=True):
        assert c.env_reward == 0.5 and result.reward == 1.5  # agent_reward="both": the verifier's + the agent's
        assert len(c.token_ids) == len(c.loss_mask) == len(c.logprobs) <= BUDGET
        seed = engine_seed + c.prompt_index * N + c.sample_index  # turn 0, as a single-turn rollout seeds it
        position, turn = 0, 0
        for t in c.turns:
            span = slice(position, position + t["num_tokens"])
            if t["role"] == "assistant":
                assert all(c.loss_mask[span])
                context = c.prompt_token_ids + c.token_ids[:position]
                turn_seed = seed if turn == 0 else derive_seed(seed, "turn", turn)
                params = SamplingConfig(
                    n=1, temperature=1.0, max_tokens=BUDGET - position, stop=[" "], include_stop_str_in_output=True,
                    seed=turn_seed, logprobs=True,
                )  # fmt: skip
                (again,) = ray.get(vllm_engine.generate.remote([context], params))
                assert again.token_ids == c.token_ids[span], (c.prompt_index, c.sample_index, turn)
                # the same engine, the same context alone instead of batched: equal up to float summation order
                assert all(
                    math.isclose(a, b, abs_tol=1e-3) for a, b in zip(again.logprobs, c.logprobs[span], strict=True)
                )
                assert all(x < 0 or x == 0.0 for x in c.logprobs[span])
                checked += t["num_tokens"]
                turn += 1
            else:  # the agent's messages: the chat template's tokens, masked, log-prob 0
                assert not any(c.loss_mask[span]) and all(x == 0.0 for x in c.logprobs[span])
            position = span.stop
        assert position == len(c.token_ids)
    assert checked == sum(sum(c.loss_mask) for c in scored.completions)


def test_a_session_that_rewrote_history_trains_its_last_piece(vllm_engine, tiny_tokenizer):
    gen = generator(vllm_engine, tiny_tokenizer, forgetful)
    scored = asyncio.run(generate(gen))
    assert scored.env_times.forks == len(ROWS) * N and scored.env_times.fork_tokens_dropped > 0
    text = tiny_tokenizer.apply_chat_template(
        [{"role": "user", "content": "again?"}], tokenize=False, add_generation_prompt=True
    )
    second = tiny_tokenizer(text, add_special_tokens=False).input_ids
    for c in scored.completions:
        assert c.prompt_token_ids == second and c.loss_mask is None  # one model turn after the new prompt


GONE: list[int] = []


def hostile(row, endpoint):
    """A plain (sync) agent in a worker thread: prompt 0 raises after its first turn, prompt 1 outlives its deadline
    and then asks again (answered 410: the rollout still runs prompt 2's sessions), prompt 2 ends normally."""
    import time

    from openai import APIStatusError, OpenAI

    client = OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    messages = [{"role": "user", "content": row["question"]}]
    client.chat.completions.create(model=endpoint.model, messages=messages)
    if row["id"] == 0:  # holds its slot for 3 s: prompt 2's sessions start after it (agent_concurrency=4)
        time.sleep(3.0)
        raise RuntimeError("the agent's own bug")
    if row["id"] == 1:  # past its 5 s deadline, while prompt 2's sessions still run
        time.sleep(5.5)
        try:
            client.chat.completions.create(model=endpoint.model, messages=messages)
        except APIStatusError as exc:
            GONE.append(exc.status_code)
        except Exception as exc:  # noqa: BLE001 - recorded for the assertion's message
            GONE.append(repr(exc))
    if row["id"] == 2:
        time.sleep(3.5)  # within its deadline; the rollout still runs when prompt 1 asks again
    return AgentResult(reward=1.0)


def test_agents_that_raise_or_time_out_end_their_samples_and_the_rollout_goes_on(vllm_engine, tiny_tokenizer):
    import time

    gen = generator(vllm_engine, tiny_tokenizer, hostile)
    gen.agents.settings = dataclasses.replace(gen.agents.settings, agent=AgentFunction(hostile, "test", False))
    gen.agents.settings = dataclasses.replace(gen.agents.settings, timeout_s=5.0)
    asyncio.run(generate(generator(vllm_engine, tiny_tokenizer, forgetful)))  # first use (imports, engine): untimed
    scored = asyncio.run(generate(gen))
    times = scored.env_times
    assert times.errors == N and times.timeouts == N and times.no_requests == 0
    by_prompt = {c.prompt_index: c for c in scored.completions}
    assert "raised RuntimeError: the agent's own bug" in by_prompt[0].env_error and by_prompt[0].env_reward == 0.0
    assert "deadline" in by_prompt[1].env_error and by_prompt[2].env_error is None and by_prompt[2].env_reward == 1.0
    for c in scored.completions:  # each trained as it stands: its one model turn
        assert c.loss_mask is None and len(c.turns) == 1
    deadline = time.time() + 10
    while len(GONE) < N and time.time() < deadline:  # the timed-out agents' threads ask once more after the deadline
        time.sleep(0.2)
    assert GONE == [410] * N

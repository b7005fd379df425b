"""``AgentRollout`` logic on a scripted engine pump and a stand-in gateway (no Ray, no vLLM, no HTTP): seeds, the
sample a session gives (last piece, forks dropped and counted), agents that raise, hang or never call, narrowing of
the sampling, the concurrency bound, reward modes. The real gateway and engines: tests/loop/test_agent_engine.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from reasonrl.agents.agent_fn import AgentFunction, AgentResult
from reasonrl.agents.gateway.backend import SamplingLimits, SessionEndpoint, TrajectoryPiece, TurnSampling
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.vllm_engine import SamplingConfig
from reasonrl.loop.agent_rollout import AgentRollout, AgentSettings, AgentTimes, agent_scored_reward
from reasonrl.rewards import RewardResult
from reasonrl.utils.rng import derive_seed

SEED = 100
N = 2


class ScriptedEngine:
    """The request pump: a turn of 3 tokens ``[seed % 1000, len(prompt), 7]``, finished on the next call."""

    def __init__(self):
        self.requests = []
        self.held = []

    async def pump(self, requests, max_wait_s):
        self.requests += requests
        out = [(r.key, self._turn(r)) for r in self.held]
        self.held = list(requests)
        if not out:
            await asyncio.sleep(0.001)
        return out

    async def abort_pumped(self):
        n, self.held = len(self.held), []
        return n

    @staticmethod
    def _turn(request):
        ids = [request.sampling.seed % 1000, len(request.prompt_token_ids), 7]
        return Completion(0, 0, list(request.prompt_token_ids), ids, f"t{ids[0]}", "stop", logprobs=[-0.5] * 3)


class Gone(Exception):
    """The stand-in gateway's 410."""


class FakeGateway:
    """A stand-in of ``AgentGateway``'s session API: ``ask(session_id, messages_tokens)`` plays one request (the
    token rendering is: the prompt is ``[1, 2]``, every new message adds the tokens it carries, masked)."""

    def __init__(self, tokenizer, backend, limits, host, model_name):
        self.backend, self.limits = backend, limits
        self.sessions: dict[str, dict] = {}
        self.closed: dict[str, str] = {}
        self.started = self.stopped = False

    async def start(self):
        self.started = True

    async def stop(self):
        self.stopped = True

    def stats(self):
        return {"added_latency_ms_mean": 1.5}

    def open_session(self, budget):
        sid = f"s{len(self.sessions)}"
        self.sessions[sid] = {"pieces": [], "turn": 0, "budget": budget}
        return SessionEndpoint(sid, f"http://fake/{sid}/v1", f"key-{sid}", "m")

    def close_session(self, sid, reason):
        self.closed[sid] = reason
        return self.sessions[sid]["pieces"]

    async def ask(self, sid, observation: list[int], *, fork=False, temperature=None):
        s = self.sessions[sid]
        if sid in self.closed:
            raise Gone("410")
        if fork or not s["pieces"]:
            s["pieces"].append(TrajectoryPiece([1, 2], [], [], [], [], "stop"))
        piece = s["pieces"][-1]
        if piece.response_ids:
            piece.response_ids += observation
            piece.logprobs += [0.0] * len(observation)
            piece.loss_mask += [False] * len(observation)
            piece.turns.append({"role": "tool", "text": "obs", "num_tokens": len(observation)})
        sampling = TurnSampling(
            max_tokens=s["budget"] - len(piece.response_ids),
            temperature=self.limits.temperature if temperature is None else temperature,
            top_p=1.0,
        )
        out = await self.backend.generate(sid, s["turn"], piece.prompt_ids + piece.response_ids, sampling)
        if sid in self.closed:  # the real gateway drops the turn and answers 410
            raise Gone("410")
        s["turn"] += 1
        piece.response_ids += out.token_ids
        piece.logprobs += out.logprobs
        piece.loss_mask += [True] * len(out.token_ids)
        piece.turns.append({"role": "assistant", "text": out.text, "num_tokens": len(out.token_ids)})
        return out


class Tok:
    eos_token_id = 0

    def decode(self, ids):
        return " ".join(map(str, ids))


def rollout(agent, *, reward="both", concurrency=8, timeout_s=5.0, limits_temperature=1.0):
    fn = AgentFunction(agent, "test:agent", asyncio.iscoroutinefunction(agent))
    limits = SamplingLimits(temperature=limits_temperature, top_p=1.0, max_tokens=64)
    settings = AgentSettings(fn, limits, concurrency=concurrency, timeout_s=timeout_s, reward=reward)
    return AgentRollout(settings, Tok(), gateway_factory=FakeGateway)


def sampling(**kw):
    return SamplingConfig(**{"n": N, "temperature": 1.0, "max_tokens": 64, "seed": SEED, "logprobs": True, **kw})


async def run_part(ro, rows, **kw):
    engine, times = ScriptedEngine(), AgentTimes()
    prompts = [[9, 9]] * len(rows)
    out = []
    async for part in ro.engine_part(engine, rows, prompts, 10, sampling(**kw), times):
        out += part
    gw = ro._gateway
    await ro.aclose()
    return sorted(out, key=lambda c: (c.prompt_index, c.sample_index)), engine, times, gw


def test_seeds_tokens_and_masks_of_a_two_turn_agent():
    async def agent(row, endpoint):
        gw = ro._gateway
        await gw.ask(endpoint.session_id, [])
        await gw.ask(endpoint.session_id, [5, 5])
        return AgentResult(reward=0.25, info={"row": row["id"]})

    ro = rollout(agent)
    rows = [{"id": 0}, {"id": 1}]
    done, engine, times, gw = asyncio.run(run_part(ro, rows))
    assert [(c.prompt_index, c.sample_index) for c in done] == [(10, 0), (10, 1), (11, 0), (11, 1)]
    seeds = sorted(r.sampling.seed for r in engine.requests)
    turn0 = [SEED + i * N + j for i in range(2) for j in range(N)]
    assert seeds == sorted(turn0 + [derive_seed(s, "turn", 1) for s in turn0])
    c = done[0]
    first = SEED  # prompt 0, sample 0
    assert c.prompt_token_ids == [1, 2]
    assert c.token_ids == [first % 1000, 2, 7, 5, 5, derive_seed(first, "turn", 1) % 1000, 7, 7]
    assert c.loss_mask == [True, True, True, False, False, True, True, True]
    assert c.logprobs == [-0.5] * 3 + [0.0] * 2 + [-0.5] * 3
    assert c.env_reward == 0.25 and c.env_error is None and c.finish_reason == "stop"
    assert times.sessions == 4 and times.requests == 8 and times.errors == times.timeouts == 0
    assert gw.started and gw.stopped and set(gw.closed.values()) == {"stop"}


def test_forks_train_the_last_piece_and_are_counted():
    async def agent(row, endpoint):
        gw = ro._gateway
        await gw.ask(endpoint.session_id, [])
        await gw.ask(endpoint.session_id, [], fork=True)  # the agent rewrote its history
        return None

    ro = rollout(agent)
    done, _, times, _ = asyncio.run(run_part(ro, [{"id": 0}]))
    assert len(done) == N and all(c.loss_mask is None and len(c.token_ids) == 3 for c in done)
    assert times.forks == N and times.fork_tokens_dropped == 3 * N


def test_agents_that_raise_hang_return_garbage_or_never_call():
    async def agent(row, endpoint):
        gw = ro._gateway
        if row["kind"] == "never":
            return AgentResult(reward=1.0)
        await gw.ask(endpoint.session_id, [])
        if row["kind"] == "raise":
            raise RuntimeError("agent crashed")
        if row["kind"] == "hang":
            await asyncio.sleep(30)
        return "garbage"

    ro = rollout(agent, timeout_s=0.3)
    rows = [{"kind": k} for k in ("never", "raise", "hang", "garbage")]
    done, _, times, gw = asyncio.run(run_part(ro, rows))
    by_kind = {rows[c.prompt_index - 10]["kind"]: c for c in done}
    never = by_kind["never"]
    assert never.token_ids == [0] and never.loss_mask == [False] and never.prompt_token_ids == [9, 9]
    assert never.env_reward == 1.0  # its own reward counts; nothing of it is trained
    assert "raised RuntimeError: agent crashed" in by_kind["raise"].env_error
    assert by_kind["raise"].loss_mask is None and len(by_kind["raise"].token_ids) == 3  # trained as it stands
    assert "deadline" in by_kind["hang"].env_error
    assert "not an AgentResult" in by_kind["garbage"].env_error
    assert times.no_requests == N and times.errors == 2 * N and times.timeouts == N
    assert sorted(gw.closed.values()).count("timeout") == N
    m = times.metrics()
    assert m["agent/errors"] == 2 * N and m["agent/timeouts"] == N and m["agent/no_requests"] == N


def test_a_request_waiting_when_its_agent_times_out_is_answered_410():
    class SlowEngine(ScriptedEngine):
        async def pump(self, requests, max_wait_s):
            self.requests += requests
            await asyncio.sleep(0.05)
            return []  # never finishes: the agent's deadline comes first

    answers = []

    def agent(row, endpoint):  # a plain function: its thread outlives the deadline and gets the 410
        try:
            asyncio.run_coroutine_threadsafe(ro._gateway.ask(endpoint.session_id, []), loop).result()
        except Gone as exc:
            answers.append(str(exc))

    async def main():
        nonlocal loop
        loop = asyncio.get_running_loop()
        engine, times = SlowEngine(), AgentTimes()
        out = []
        parts = ro.engine_part(engine, [{"id": 0}], [[3]], 0, sampling(n=1), times)
        async for part in parts:
            out += part
        await asyncio.sleep(0.1)  # the agent thread's request: answered while the loop runs
        await ro.aclose()
        return out, times

    loop = None
    ro = rollout(agent, timeout_s=0.2)
    done, times = asyncio.run(main())
    assert times.timeouts == 1 and done[0].loss_mask == [False]  # no finished turn: nothing trained
    assert answers == ["410"]


def test_requests_narrow_the_sampling_never_widen_it():
    temperatures = []

    async def agent(row, endpoint):
        await ro._gateway.ask(endpoint.session_id, [], temperature=row["t"])

    class Recording(ScriptedEngine):
        async def pump(self, requests, max_wait_s):
            temperatures.extend((r.sampling.temperature, r.sampling.top_k, r.sampling.stop) for r in requests)
            return await super().pump(requests, max_wait_s)

    async def main(rollout_temperature):
        out = []
        parts = ro.engine_part(
            Recording(),
            [{"t": 2.0}, {"t": 0.5}],
            [[3], [3]],
            0,
            sampling(n=1, temperature=rollout_temperature, top_k=5, stop=["X"]),
            AgentTimes(),
        )
        async for part in parts:
            out += part
        await ro.aclose()

    ro = rollout(agent, limits_temperature=2.0)
    asyncio.run(main(1.0))
    assert sorted(temperatures) == [(0.5, 5, ["X"]), (1.0, 5, ["X"])]
    temperatures.clear()
    asyncio.run(main(0.0))  # a greedy eval stays greedy whatever the agent asks
    assert temperatures == [(0.0, 0, ["X"]), (0.0, 0, ["X"])]


def test_agent_concurrency_bounds_the_running_agents():
    running, peak = [0], [0]

    def agent(row, endpoint):  # a plain function: runs in a worker thread
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        running[0] -= 1
        return AgentResult()

    ro = rollout(agent, concurrency=3)
    done, *_ = asyncio.run(run_part(ro, [{"id": i} for i in range(5)]))
    assert len(done) == 5 * N and peak[0] == 3


@pytest.mark.parametrize(("mode", "expected"), [("agent", 0.5), ("verifier", 1.0), ("both", 1.5)])
def test_reward_modes(mode, expected):
    from reasonrl.rewards.shaping import final_reward

    async def agent(row, endpoint):
        await ro._gateway.ask(endpoint.session_id, [])
        return AgentResult(reward=0.5)

    ro = rollout(agent, reward=mode)
    done, *_ = asyncio.run(run_part(ro, [{"id": 0}], n=1))
    result = RewardResult(reward=1.0, correct=True, reason="correct")
    agent_scored_reward(result, mode)
    assert final_reward(result, env_reward=done[0].env_reward) == expected
    assert result.correct  # the verifier's verdict still counts for accuracy


def test_agent_metrics_sum_tries_and_read_the_gateway():
    from reasonrl.loop.agent_rollout import agent_metrics

    a, b = AgentTimes(sessions=2, requests=6, errors=1), AgentTimes(sessions=2, requests=2, forks=3)
    m = agent_metrics([a, b], {"added_latency_ms_mean": 2.5})
    assert m["agent/sessions"] == 4 and m["agent/requests_per_session"] == 2.0
    assert m["agent/errors"] == 1 and m["agent/forks"] == 3 and m["agent/gateway_added_latency_ms"] == 2.5
    assert AgentTimes().metrics()["agent/timeouts"] == 0


def test_tool_counts_keep_only_counts():
    from reasonrl.loop.agent_rollout import tool_counts

    assert tool_counts({"tool_calls": {"calculator": 2, "bad": "x"}, "tool_errors": 3, "other": 1}) == {
        "tool_calls": {"calculator": 2.0}
    }
    assert tool_counts({"tool_calls": 5}) == {} and tool_counts([]) == {}

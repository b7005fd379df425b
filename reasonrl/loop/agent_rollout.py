"""Agent rollouts (``agent_fn``, docs/agents.md): each sample is one run of the user's agent program against its own
OpenAI-compatible session of the agent gateway, every model turn generated on the run's engines.

The counterpart of :mod:`reasonrl.loop.multi_turn` with the roles turned round: there the loop calls the
environment; here the agent calls the model. Per engine, one asyncio task drives that engine's request pump
(``VLLMEngine.pump``) as multi-turn rollouts do (with ``PUMP_DEPTH`` calls in flight), and this class is the gateway's
:class:`~reasonrl.agents.gateway.backend.TurnBackend`: a request of a session becomes a ``TurnRequest`` of the pump
of the engine that owns the session, and the request's future is resolved when the engine finishes the turn. Turns of
every session join the running batch (continuous batching across sessions and turns).

One sample::

    endpoint = gateway.open_session(budget=generate_max_len)
    result = await agent_fn(row, endpoint)              # bounded by agent_concurrency, agent_timeout_s
    pieces = gateway.close_session(endpoint.session_id)  # the engine's tokens and log-probs, verbatim
    completion = the last piece (prompt, response, loss mask, turns), its reward per agent_reward

Seeds: turn 0 of sample ``j`` of prompt ``i`` on an engine is seeded ``seed + i * n + j``, as a single-turn or
multi-turn rollout seeds it; turn ``k > 0`` uses ``derive_seed(that seed, "turn", k)``. A deterministic agent gives
the same samples whatever the timing.

Rules (documented in docs/agents.md):

* **one sample per session.** GRPO groups, dynamic sampling, the streamed forwards and resume count exactly ``n``
  samples per prompt, so a session gives one trained sample: its last piece (the one that holds the final answer,
  which the reward judges). When the agent rewrote history the session forked; the pieces before the last are not
  trained (counted in ``agent/forks`` and ``agent/fork_tokens_dropped``) and share the session's reward in the dump.
* **an agent that raised, returned something else than an AgentResult, or passed agent_timeout_s** ends its sample
  with what the session has: trained as it stands (like an environment failure of ``env_fn``), scored by the verifier
  on its last answer, agent reward 0; counted in ``agent/errors`` / ``agent/timeouts``, the reason in ``env_error``.
* **a session with no model turn** (the agent never called the endpoint, or failed first) is kept in its group as a
  one-token sample with nothing trained (loss mask all False), reward as scored on an empty answer; counted in
  ``agent/no_requests``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from loguru import logger

from reasonrl.agents.agent_fn import AgentFunction, AgentResult
from reasonrl.agents.gateway.backend import SamplingLimits, TrajectoryPiece, TurnOutput, TurnSampling
from reasonrl.dataplane.completion import Completion, TurnRequest
from reasonrl.distributed.handles import EngineHandle
from reasonrl.loop.multi_turn import EnvTimes
from reasonrl.utils.rng import derive_seed

AGENT_REWARD_MODES = ("agent", "verifier", "both")
MODEL_NAME = "reasonrl-policy"
# Pump calls kept in flight per engine: the engine actor runs them one after the other, so while the driver answers
# the agents of one call's finished turns (their HTTP, their client's CPU) the next call already steps the engine.
PUMP_DEPTH = 2


_ENDED = object()  # what a turn's future gets when its session or rollout ended first


def _ended_turn() -> TurnOutput:
    return TurnOutput([], [], "", "length")


@dataclasses.dataclass(frozen=True)
class AgentSettings:
    """The config values of agent rollouts (``GenerationSettings.from_config``): the loaded agent function,
    ``concurrency`` (agent functions at once, over every engine), ``timeout_s`` (one call's deadline), ``reward``
    (``agent`` / ``verifier`` / ``both``), the gateway's ``host`` and the widest sampling a request may ask for
    (``limits``: the run's largest temperature, its top_p, generate_max_len)."""

    agent: AgentFunction
    limits: SamplingLimits
    concurrency: int = 64
    timeout_s: float = 300.0
    reward: str = "both"
    host: str = "127.0.0.1"
    model_name: str = MODEL_NAME

    @classmethod
    def from_config(cls, cfg) -> AgentSettings:
        from reasonrl.agents.agent_fn import load_agent_fn

        limits = SamplingLimits(
            temperature=max(cfg.temperature, cfg.eval_temperature),
            top_p=cfg.top_p,
            max_tokens=cfg.generate_max_len,
            max_prompt_tokens=cfg.max_prompt_len,
        )
        return cls(
            agent=load_agent_fn(cfg.agent_fn),
            limits=limits,
            concurrency=cfg.agent_concurrency,
            timeout_s=cfg.agent_timeout_s,
            reward=cfg.agent_reward,
            host=cfg.agent_gateway_host,
        )


@dataclasses.dataclass
class AgentTimes(EnvTimes):
    """:class:`EnvTimes` of one agent rollout (``env_s``: seconds inside agent functions, summed) and its counts."""

    sessions: int = 0
    requests: int = 0
    errors: int = 0
    timeouts: int = 0
    no_requests: int = 0
    forks: int = 0
    fork_tokens_dropped: int = 0

    def metrics(self) -> dict[str, float]:
        """The ``agent/*`` scalars of this rollout (docs/agents.md)."""
        return {
            "agent/sessions": float(self.sessions),
            "agent/requests_per_session": self.requests / max(self.sessions, 1),
            "agent/errors": float(self.errors),
            "agent/timeouts": float(self.timeouts),
            "agent/no_requests": float(self.no_requests),
            "agent/forks": float(self.forks),
            "agent/fork_tokens_dropped": float(self.fork_tokens_dropped),
        }


def agent_metrics(times: Sequence[AgentTimes], gateway_stats: dict | None = None) -> dict[str, float]:
    """The ``agent/*`` scalars of a step's rollout tries summed (``requests_per_session`` over all of them), and the
    gateway's mean added latency per request since it started when ``gateway_stats`` has it."""
    total = AgentTimes()
    for t in times:
        for name in ("sessions", "requests", "errors", "timeouts", "no_requests", "forks", "fork_tokens_dropped"):
            setattr(total, name, getattr(total, name) + getattr(t, name))
    m = total.metrics()
    if gateway_stats and gateway_stats.get("added_latency_ms_mean") is not None:
        m["agent/gateway_added_latency_ms"] = float(gateway_stats["added_latency_ms_mean"])
    return m


@dataclasses.dataclass
class _Session:
    """What the backend knows of an open session: its engine part, its turn-0 seed and the rollout's sampling."""

    part: _Part
    seed: int | None
    sampling: object  # the rollout's SamplingConfig (n, temperature, top_p, stop, logprobs)
    times: AgentTimes
    pending: set = dataclasses.field(default_factory=set)


class _Part:
    """One engine part's requests waiting to enter the pump, and the futures of those sent."""

    def __init__(self):
        self.ready: list[TurnRequest] = []
        self.futures: dict[str, asyncio.Future] = {}
        self.wake = asyncio.Event()

    def submit(self, request: TurnRequest, future: asyncio.Future) -> None:
        self.ready.append(request)
        self.futures[request.key] = future
        self.wake.set()


@dataclasses.dataclass
class _SampleEnd:
    pieces: list[TrajectoryPiece]
    result: AgentResult | None
    error: str | None
    timed_out: bool


class AgentRollout:
    """Runs agent sessions on the engines (see the module docstring) and is the gateway's turn backend. One instance
    per generator; the gateway is started on first use in the running event loop and stopped by :meth:`aclose`.

    ``gateway_factory(tokenizer, backend, limits, host, model_name)`` builds the gateway (tests pass a stand-in);
    the default is :class:`reasonrl.agents.gateway.server.AgentGateway`."""

    def __init__(self, settings: AgentSettings, tokenizer, gateway_factory: Callable | None = None):
        self.settings, self.tokenizer = settings, tokenizer
        self.gateway_factory = gateway_factory or _default_gateway
        self.executor: ThreadPoolExecutor | None = None  # the threads of plain (sync) agent functions
        self.sessions: dict[str, _Session] = {}
        self._gateway = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._keys = itertools.count()

    # ------------------------------------------------------------------------------------------ the gateway
    async def gateway(self):
        """The gateway of the running event loop, started on first use (a loop that ended took its server with it:
        the eval CLI runs one loop per eval set)."""
        loop = asyncio.get_running_loop()
        if self._gateway is not None and self._loop is loop:
            return self._gateway
        if self._gateway is not None:
            logger.debug("agent gateway: its event loop ended; starting a new one")
        s = self.settings
        gateway = self.gateway_factory(self.tokenizer, self, s.limits, s.host, s.model_name)
        await gateway.start()
        self._gateway, self._loop = gateway, loop
        if self.executor is None:
            self.executor = ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="reasonrl-agent")
        self._semaphore = asyncio.Semaphore(s.concurrency)
        return gateway

    def gateway_stats(self) -> dict:
        """The running gateway's counters (empty before it started)."""
        return dict(self._gateway.stats()) if self._gateway is not None else {}

    async def aclose(self) -> None:
        """Stop the gateway (when it runs in this loop) and let the agent threads go."""
        gateway, self._gateway = self._gateway, None
        if gateway is not None and self._loop is asyncio.get_running_loop():
            await gateway.stop()
        executor, self.executor = self.executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------------------------------ TurnBackend
    async def generate(self, session_id: str, turn: int, prompt_ids: list[int], sampling: TurnSampling) -> TurnOutput:
        """One model turn of ``session_id`` on its engine (the gateway's call). The request narrows the rollout's
        sampling, never widens it: temperature and top_p are the smaller of the two; the turn stops at the run's
        stop strings and the request's. A session whose sample ended gets an empty turn, which the gateway drops
        (its session is closed: the agent's request is answered 410)."""
        session = self.sessions.get(session_id)
        if session is None:
            return _ended_turn()
        base = session.sampling
        seed = session.seed if turn == 0 or session.seed is None else derive_seed(session.seed, "turn", turn)
        temperature = min(float(sampling.temperature), float(base.temperature))
        greedy = temperature == 0
        stop = list(dict.fromkeys([*(base.stop or []), *sampling.stop]))
        params = dataclasses.replace(
            base,
            n=1,
            max_tokens=int(sampling.max_tokens),
            temperature=temperature,
            top_p=1.0 if greedy else min(float(sampling.top_p), float(base.top_p)),
            top_k=0 if greedy else base.top_k,
            stop=stop or None,
            seed=seed,
        )
        future = asyncio.get_running_loop().create_future()
        session.pending.add(future)
        session.times.requests += 1
        session.part.submit(TurnRequest(f"{session_id}#{next(self._keys)}", list(prompt_ids), params), future)
        try:
            c = await future
        finally:
            session.pending.discard(future)
        if c is _ENDED:
            return _ended_turn()
        logprobs = list(c.logprobs) if c.logprobs is not None else None
        return TurnOutput(list(c.token_ids), logprobs, c.text, c.finish_reason, c.token_versions)

    # ------------------------------------------------------------------------------------------ a rollout part
    async def engine_part(
        self,
        engine: EngineHandle,
        rows: Sequence[dict],
        prompt_ids: Sequence[list[int]],
        offset: int,
        sampling,
        times: AgentTimes,
        lock: asyncio.Lock | None = None,
    ) -> AsyncIterator[list[Completion]]:
        """Run ``sampling.n`` agent sessions per row on ``engine``; yield finished samples as they end, as
        :class:`Completion` s with ``prompt_index`` counted from ``offset``. ``prompt_ids`` (the data template's
        rendering of each row) is only the prompt of a session that never called the endpoint. ``lock``: the
        engine's, held from the first turn to the last (as :meth:`MultiTurnRollout.engine_part`)."""
        async with lock if lock is not None else contextlib.nullcontext():
            parts = self._sessions(engine, rows, prompt_ids, offset, sampling, times)
            async with contextlib.aclosing(parts) as ended_parts:
                async for ended in ended_parts:
                    yield ended

    async def _sessions(self, engine, rows, prompt_ids, offset, sampling, times) -> AsyncIterator[list[Completion]]:
        gateway = await self.gateway()
        part, n = _Part(), sampling.n
        tasks: dict[asyncio.Future, tuple[int, int]] = {}
        for i, row in enumerate(rows):
            for j in range(n):
                seed = None if sampling.seed is None else sampling.seed + i * n + j
                tasks[asyncio.ensure_future(self._sample(gateway, part, row, seed, sampling, times))] = (i, j)
        in_engine = 0  # turns added to the engine whose results have not come back
        calls: collections.deque = collections.deque()  # pump calls in flight, oldest first
        try:
            while tasks:  # once every agent has ended, what is left in the engine waits for no one: aborted
                if not part.ready and not in_engine and not calls:  # every agent is between requests: wait for one
                    part.wake.clear()
                    waited = time.perf_counter()
                    wake = asyncio.ensure_future(part.wake.wait())
                    await asyncio.wait([*tasks, wake], return_when=asyncio.FIRST_COMPLETED)
                    wake.cancel()
                    times.exposed_s += time.perf_counter() - waited
                while len(calls) < PUMP_DEPTH and (part.ready or in_engine):
                    batch, part.ready = part.ready, []
                    calls.append(asyncio.ensure_future(engine.pump(batch, 0.2)))
                    in_engine += len(batch)
                if calls:
                    finished = await calls.popleft()
                    in_engine -= len(finished)
                    for key, completion in finished:
                        future = part.futures.pop(key, None)
                        if future is not None and not future.done():
                            future.set_result(completion)
                ended = []
                for task in [t for t in tasks if t.done()]:
                    i, j = tasks.pop(task)
                    ended.append(self._completion(task.result(), offset + i, j, prompt_ids[i], sampling, times))
                if ended:
                    yield ended
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for call in calls:  # the engine actor runs them in order: let them end before the abort
                with contextlib.suppress(Exception):
                    in_engine -= len(await call)
            for future in part.futures.values():
                if not future.done():
                    future.set_result(_ENDED)
            if in_engine:
                await engine.abort_pumped()

    async def _sample(self, gateway, part: _Part, row: dict, seed, sampling, times: AgentTimes) -> _SampleEnd:
        """Open a session, run the agent function on it (bounded), close it: its pieces and how the agent ended."""
        async with self._semaphore:
            endpoint = gateway.open_session(budget=sampling.max_tokens)
            session = _Session(part, seed, sampling, times)
            self.sessions[endpoint.session_id] = session
            times.sessions += 1
            result = error = None
            timed_out = False
            start = time.perf_counter()
            try:
                call = self.settings.agent(row, endpoint, self.executor)
                result = await asyncio.wait_for(call, self.settings.timeout_s)
            except TimeoutError:
                timed_out, error = True, f"the agent function passed its {self.settings.timeout_s:g}s deadline"
                times.timeouts += 1
            except Exception as exc:  # noqa: BLE001 - a user's agent may raise anything; counted, not raised
                error = f"the agent function raised {type(exc).__name__}: {exc}"
                times.errors += 1
            finally:
                times.add_env(time.perf_counter() - start)
                self.sessions.pop(endpoint.session_id, None)
                reason = "timeout" if timed_out else ("error" if error else "stop")
                pieces = list(gateway.close_session(endpoint.session_id, reason) or [])
                for future in list(session.pending):  # a request still waiting: answered 410 by the gateway
                    if not future.done():
                        future.set_result(_ENDED)
        return _SampleEnd(pieces, result, error, timed_out)

    # ------------------------------------------------------------------------------------------ samples
    def _completion(self, end: _SampleEnd, prompt_index: int, sample_index: int, fallback_prompt, sampling, times):
        """The session's trained sample (see the module docstring's rules)."""
        pieces = [p for p in end.pieces if any(p.loss_mask)]
        agent_reward = end.result.reward if end.result is not None and end.result.reward is not None else 0.0
        env_reward = agent_reward if self.settings.reward in ("agent", "both") else 0.0
        info = end.result.info if end.result is not None else {}
        if not pieces:
            times.no_requests += 1
            eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
            error = end.error or "the agent never called its endpoint"
            logger.debug(f"agent sample {prompt_index}/{sample_index}: no model turn ({error})")
            return Completion(
                prompt_index=prompt_index,
                sample_index=sample_index,
                prompt_token_ids=list(fallback_prompt),
                token_ids=[eos],
                text="",
                finish_reason="stop",
                logprobs=[0.0] if sampling.logprobs else None,
                loss_mask=[False],
                turns=[{"role": "agent", "text": "", "num_tokens": 1, "info": tool_counts(info)}],
                env_reward=env_reward,
                env_error=error,
            )
        last = pieces[-1]
        if len(pieces) > 1:
            times.forks += len(pieces) - 1
            times.fork_tokens_dropped += sum(len(p.response_ids) for p in pieces[:-1])
        if end.error:
            logger.debug(f"agent sample {prompt_index}/{sample_index} ended early: {end.error}")
        turns = [{k: v for k, v in t.items() if k != "token_ids"} for t in last.turns]
        if turns:
            turns[-1]["info"] = tool_counts(info)  # multi_turn/tool_calls/<tool> of the step
        finish = "length" if last.finish_reason == "length" else "stop"
        return Completion(
            prompt_index=prompt_index,
            sample_index=sample_index,
            prompt_token_ids=list(last.prompt_ids),
            token_ids=list(last.response_ids),
            text=piece_text(self.tokenizer, last),
            finish_reason=finish,
            logprobs=_logprobs(last) if sampling.logprobs else None,
            loss_mask=None if all(last.loss_mask) else [bool(m) for m in last.loss_mask],
            turns=turns,
            env_reward=env_reward,
            env_error=end.error,
            token_versions=list(last.token_versions) if last.token_versions else None,
        )


def tool_counts(info: dict) -> dict[str, dict[str, float]]:
    """The ``tool_calls`` / ``tool_errors`` counts of an agent's ``AgentResult.info`` (``{"tool_calls": {name: n}}``,
    as an environment's ``StepResult.info``), for the ``multi_turn/tool_*`` figures; anything else is left out."""
    out = {}
    for key in ("tool_calls", "tool_errors"):
        counts = info.get(key) if isinstance(info, dict) else None
        if isinstance(counts, dict):
            good = {
                str(k): float(v) for k, v in counts.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            if good:
                out[key] = good
    return out


def piece_text(tokenizer, piece: TrajectoryPiece) -> str:
    """The response text of a piece, for the scorer and the dumps: each model turn's text as the engine decoded it,
    the tokens between turns (the messages the agent added, with the chat template's framing) decoded. Falls back
    to decoding the whole response when the turns do not line up with the loss mask's runs."""
    runs: list[tuple[bool, list[int]]] = []
    for token, trained in zip(piece.response_ids, piece.loss_mask, strict=True):
        if runs and runs[-1][0] == bool(trained):
            runs[-1][1].append(token)
        else:
            runs.append((bool(trained), [token]))
    model_texts = [t.get("text", "") for t in piece.turns if t.get("role") == "assistant"]
    if len(model_texts) != sum(trained for trained, _ in runs):
        return tokenizer.decode(piece.response_ids)
    texts = iter(model_texts)
    return "".join(next(texts) if trained else tokenizer.decode(ids) for trained, ids in runs)


def _logprobs(piece: TrajectoryPiece) -> list[float]:
    if piece.logprobs is None:
        raise ValueError("the run keeps engine log-probs but the gateway's piece has none")
    return [float(x) for x in piece.logprobs]


def agent_scored_reward(result, mode: str) -> None:
    """``agent_reward='agent'``: the verifier's reward is not part of the final reward (it still says ``correct``
    for the accuracy figures); the agent's reward joins as the completion's ``env_reward``. Call before
    :func:`reasonrl.rewards.shaping.final_reward`."""
    if mode == "agent" and getattr(result, "scored_reward", None) is None:
        result.reward = 0.0


def agent_problems(agent_fn: str, tokenizer) -> list[str]:
    """Why agent rollouts cannot start (empty when they can): ``agent_fn`` does not import or is not a function of
    ``(row, endpoint)``, or the tokenizer has no chat template to render the agents' messages. Cheap: run before Ray
    starts."""
    from reasonrl.agents.agent_fn import agent_fn_problems

    problems = agent_fn_problems(agent_fn)
    if getattr(tokenizer, "chat_template", None) is None:
        problems.append(
            f"agent_fn={agent_fn!r}: pretrain's tokenizer has no chat_template, so the gateway cannot render the "
            "agents' chat messages; use a chat model or add a chat_template"
        )
    return problems


def _default_gateway(tokenizer, backend, limits: SamplingLimits, host: str, model_name: str):
    from reasonrl.agents.gateway.server import AgentGateway

    return AgentGateway(tokenizer, backend, limits, model=model_name, host=host)

"""The contract between the agent gateway (HTTP, sessions, token-faithful trajectories) and the rollout that owns the
engines (``reasonrl.loop.agent_rollout``). Plain data and a protocol: no vllm, torch, ray or fastapi imports here.

    gateway = AgentGateway(tokenizer, backend, limits=SamplingLimits(...))   # backend: a TurnBackend
    await gateway.start()                                  # listens on 127.0.0.1:<free port> in the running loop
    endpoint = gateway.open_session(budget=generate_max_len)  # SessionEndpoint(session_id, base_url, api_key, model)
    ... the agent talks to endpoint.base_url with the openai client; each request becomes one backend.generate(...) ...
    pieces = gateway.close_session(endpoint.session_id, reason)   # -> list[TrajectoryPiece]; later requests get 410
    await gateway.stop()
"""

from __future__ import annotations

import dataclasses
from typing import Protocol


@dataclasses.dataclass(frozen=True)
class SamplingLimits:
    """The run's sampling: a request may narrow it (lower temperature / top_p / max_tokens), never widen it."""

    temperature: float
    top_p: float
    max_tokens: int  # the session's token budget (``generate_max_len``): model and observation tokens together
    max_prompt_tokens: int | None = None  # a first (or forked) request rendered longer is a 400 (``prompt_max_len``)


@dataclasses.dataclass(frozen=True)
class TurnSampling:
    """One model turn's sampling, already clamped to :class:`SamplingLimits` and the session's budget left."""

    max_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...] = ()


@dataclasses.dataclass
class TurnOutput:
    """What the engine sampled for one turn: ``token_ids`` verbatim, ``logprobs[i]`` for ``token_ids[i]`` (None when
    the run does not keep log-probs), ``finish_reason`` ``"stop"`` or ``"length"``."""

    token_ids: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: str
    token_versions: list[int] | None = None


class TurnBackend(Protocol):
    """Generates one model turn for a session on the run's engines (in the same continuous batch as every other
    session). ``turn`` counts the session's model turns from 0 (seeds are derived from it)."""

    async def generate(
        self, session_id: str, turn: int, prompt_ids: list[int], sampling: TurnSampling
    ) -> TurnOutput: ...


@dataclasses.dataclass(frozen=True)
class SessionEndpoint:
    """What the agent function receives as ``endpoint``: an OpenAI client built as
    ``openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)`` calls ``model=endpoint.model``."""

    session_id: str
    base_url: str
    api_key: str
    model: str


@dataclasses.dataclass
class TrajectoryPiece:
    """One trained sample cut from a session (a session forks into several pieces when the agent rewrote history).

    ``prompt_ids``: the first request's rendering (chat template, generation prompt added); ``response_ids``: every
    token after it, model turns (``loss_mask`` True, the engine's ids and log-probs verbatim) and the tokens of the
    messages the agent added between turns (``loss_mask`` False, log-prob 0.0). ``turns``: [{"role", "text",
    "num_tokens", ...}] in order, as ``Completion.turns``. ``finish_reason``: ``"stop"``, ``"length"`` (budget) or
    ``"fork"`` (closed because the next request rewrote history). ``messages``: the OpenAI messages of the piece."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None
    loss_mask: list[bool]
    turns: list[dict]
    finish_reason: str
    messages: list[dict] = dataclasses.field(default_factory=list)
    token_versions: list[int] | None = None

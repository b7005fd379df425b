"""The token-faithful session: what one sample's agent said and what the model answered, as the token ids the engine
saw and sampled. Pure logic, no HTTP (the server in :mod:`reasonrl.agents.gateway.server` drives it).

A session holds a trajectory piece (a :class:`~reasonrl.agents.gateway.backend.TrajectoryPiece` in the making):

* ``prompt_ids``: the piece's first request rendered with the tokenizer's chat template (``tools=`` passed,
  generation prompt added);
* then, per model turn, the engine's token ids and log-probs verbatim (``loss_mask`` True), and between turns the
  tokens of the messages the agent added (tool results, user messages: ``loss_mask`` False, log-prob 0.0),
  computed by :class:`~reasonrl.agents.gateway.framing.ChatFraming` without re-tokenising anything the model wrote.

**Extends or forks.** A request *extends* the piece when its ``tools`` are the same and its messages start with
exactly the piece's messages, the assistant ones compared with what the gateway *returned* (content, and tool calls
as name + parsed JSON arguments: re-serialised JSON with other spacing or key order is the same call; ``content``
``None`` and ``""`` are the same; ids are not compared; see :func:`~reasonrl.agents.gateway.messages.same_message`).
Only the new messages' tokens are appended. Any other request (the agent summarised, dropped a turn, stripped
``<think>``, changed its tools, or sent the same request twice) *forks*: the piece so far is closed with
``finish_reason="fork"`` and a new piece starts from the request's own rendering. The model turns of a piece are
never re-tokenised; forks are counted.

**Budget.** Each piece has ``budget`` response tokens (the run's ``generate_max_len``: model and observation tokens
together). A turn gets ``max_tokens = min(request's, budget left)``. When nothing is left, or the added messages do
not fit, the answer is ``finish_reason="length"`` with empty content, the backend is not called, the added messages
are not recorded, and the session is *ended by budget*: every later request gets the same answer and the piece
closes with ``finish_reason="length"``. A model turn cut at the budget ends the session the same way.

**Sampling.** A request may lower the run's temperature, top_p and max_tokens, never raise them (higher values are
clamped); ``stop`` strings are honoured (the turn's tokens stay as sampled; the next appended text then carries the
whole turn close, EOS included, as the template writes it).
"""

from __future__ import annotations

import dataclasses

from reasonrl.agents.gateway.backend import SamplingLimits, TrajectoryPiece, TurnOutput, TurnSampling
from reasonrl.agents.gateway.framing import ChatFraming
from reasonrl.agents.gateway.messages import ModelReply, same_message, split_reply, tools_key


class PromptTooLong(ValueError):
    """A piece's first request renders to more tokens than :attr:`SamplingLimits.max_prompt_tokens`."""


class SessionClosed(RuntimeError):
    """The session's sample ended (:meth:`Session.close`); later requests are refused (HTTP 410)."""


@dataclasses.dataclass(frozen=True)
class ChatTurnRequest:
    """A validated chat-completions request, as the session reads it: normalised messages (see
    :mod:`reasonrl.agents.gateway.messages`), the request's ``tools`` (OpenAI function schemas) and its sampling."""

    messages: list[dict]
    tools: list[dict] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()


@dataclasses.dataclass
class TurnPlan:
    """What a request will do, decided before the backend is called; :meth:`Session.commit` applies it.

    ``sampling`` None: the budget is spent, answer ``length`` without calling the backend. ``fork``: the current
    piece closes first. ``context_ids``: the whole piece the engine continues (prompt, response so far, appended)."""

    request: ChatTurnRequest
    turn: int
    fork: bool
    new_piece: bool
    prompt_ids: list[int]
    appended_ids: list[int]
    appended_text: str
    new_messages: list[dict]
    context_ids: list[int]
    sampling: TurnSampling | None


@dataclasses.dataclass(frozen=True)
class TurnAnswer:
    """One answered request: the reply, the OpenAI ``finish_reason`` (``stop``, ``tool_calls`` or ``length``) and
    the usage counts (prompt: the context the engine read; completion: the model's tokens)."""

    reply: ModelReply
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


@dataclasses.dataclass
class _Piece:
    prompt_ids: list[int]
    messages: list[dict]
    tools_key: str
    response_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] | None = dataclasses.field(default_factory=list)
    loss_mask: list[bool] = dataclasses.field(default_factory=list)
    versions: list[int] | None = dataclasses.field(default_factory=list)
    turns: list[dict] = dataclasses.field(default_factory=list)
    ended_with_eos: bool = True
    model_turns: int = 0

    def append(self, ids: list[int], logprobs: list[float] | None, mask: bool, versions: list[int] | None) -> None:
        self.response_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        if self.logprobs is not None:
            self.logprobs = self.logprobs + list(logprobs) if logprobs is not None else None
        if self.versions is not None:
            self.versions = self.versions + list(versions) if versions is not None else None

    def close(self, finish_reason: str) -> TrajectoryPiece:
        return TrajectoryPiece(
            prompt_ids=list(self.prompt_ids),
            response_ids=list(self.response_ids),
            logprobs=None if self.logprobs is None else list(self.logprobs),
            loss_mask=list(self.loss_mask),
            turns=[dict(t) for t in self.turns],
            finish_reason=finish_reason,
            messages=[dict(m) for m in self.messages],
            token_versions=None if self.versions is None else list(self.versions),
        )


class Session:
    """One sample's conversation (see the module docstring). Not thread-safe: the server runs one request of a
    session at a time (``plan`` → ``backend.generate`` → ``commit``)."""

    def __init__(self, session_id: str, framing: ChatFraming, limits: SamplingLimits, budget: int | None = None):
        self.session_id = session_id
        self.framing = framing
        self.limits = limits
        self.budget = limits.max_tokens if budget is None else min(int(budget), limits.max_tokens)
        if self.budget < 1:
            raise ValueError(f"a session's token budget must be >= 1, got {budget}")
        self.current: _Piece | None = None
        self.done: list[TrajectoryPiece] = []
        self.turn = 0  # model turns generated in this session (all pieces): the backend's seed index
        self.forks = 0
        self.ended_by_budget = False
        self.closed = False
        self.model_tokens = 0
        self.observation_tokens = 0

    def plan(self, request: ChatTurnRequest) -> TurnPlan:
        """Decide what ``request`` does: extend (appended tokens), fork (a new piece), or ``length`` (budget spent).
        Changes nothing. Raises :class:`SessionClosed`, :class:`PromptTooLong`."""
        if self.closed:
            raise SessionClosed(self.session_id)
        piece = self.current
        if self.ended_by_budget:
            return self._plan(request, fork=False, new_piece=False, prompt_ids=[], appended=([], ""), left=0)
        if piece is not None and self.extends(request):
            new = request.messages[len(piece.messages) :]
            text = self.framing.appended_text(new, request.tools, turn_ended_with_eos=piece.ended_with_eos)
            ids = self.framing.encode(text)
            left = self.budget - len(piece.response_ids) - len(ids)
            return self._plan(request, fork=False, new_piece=False, prompt_ids=[], appended=(ids, text), left=left)
        prompt_ids = self.framing.prompt_ids(request.messages, request.tools)
        limit = self.limits.max_prompt_tokens
        if limit is not None and len(prompt_ids) > limit:
            raise PromptTooLong(
                f"the messages render to {len(prompt_ids)} prompt tokens, more than the run's {limit} (prompt_max_len)"
            )
        return self._plan(
            request, fork=piece is not None, new_piece=True, prompt_ids=prompt_ids, appended=([], ""), left=self.budget
        )

    def extends(self, request: ChatTurnRequest) -> bool:
        """Does ``request`` continue the current piece (see the module docstring)?"""
        piece = self.current
        if piece is None or tools_key(request.tools) != piece.tools_key:
            return False
        if len(request.messages) < len(piece.messages):
            return False
        return all(same_message(a, b) for a, b in zip(request.messages, piece.messages, strict=False))

    def _plan(self, request, *, fork, new_piece, prompt_ids, appended, left) -> TurnPlan:
        ids, text = appended
        piece = self.current
        if new_piece:
            context = list(prompt_ids)
        else:
            context = ([] if piece is None else piece.prompt_ids + piece.response_ids) + ids
        new_messages = [] if new_piece or piece is None else request.messages[len(piece.messages) :]
        sampling = self._sampling(request, left) if left > 0 else None
        return TurnPlan(
            request, self.turn, fork, new_piece, list(prompt_ids), ids, text, new_messages, context, sampling
        )

    def _sampling(self, request: ChatTurnRequest, left: int) -> TurnSampling:
        lim = self.limits
        max_tokens = left if request.max_tokens is None else min(left, request.max_tokens)
        temperature = lim.temperature if request.temperature is None else min(request.temperature, lim.temperature)
        top_p = lim.top_p if request.top_p is None else min(request.top_p, lim.top_p)
        return TurnSampling(max_tokens=max_tokens, temperature=temperature, top_p=top_p, stop=tuple(request.stop))

    def commit(self, plan: TurnPlan, output: TurnOutput | None) -> TurnAnswer:
        """Apply ``plan`` with the backend's ``output`` (None when ``plan.sampling`` is None: the budget answer).
        Raises :class:`SessionClosed` when the session closed meanwhile (the output is dropped), ``ValueError`` (the
        session unchanged) when the output's log-probs or versions do not match its ids."""
        if self.closed:
            raise SessionClosed(self.session_id)
        if plan.sampling is None or output is None:
            self.ended_by_budget = True
            return TurnAnswer(ModelReply("", (), ()), "length", len(plan.context_ids), 0)
        ids = list(output.token_ids)
        for name in ("logprobs", "token_versions"):
            values = getattr(output, name)
            if values is not None and len(values) != len(ids):
                raise ValueError(f"the backend returned {len(ids)} token ids and {len(values)} {name}")
        if plan.fork and self.current is not None:
            self._close_current("fork")
            self.forks += 1
        if plan.new_piece:
            self.current = _Piece(list(plan.prompt_ids), list(plan.request.messages), tools_key(plan.request.tools))
        piece = self.current
        if not plan.new_piece:
            self._append_messages(piece, plan)
        piece.append(ids, output.logprobs, True, output.token_versions)
        text = output.text
        if text.endswith(self.framing.eos_text):
            text = text[: -len(self.framing.eos_text)]
        reply = split_reply(text, self.session_id, self.turn)
        piece.messages.append(reply.message())
        piece.turns.append({"role": "assistant", "text": text, "num_tokens": len(ids), "token_ids": ids})
        piece.ended_with_eos = bool(ids) and ids[-1] == self.framing.eos_id
        piece.model_turns += 1
        self.turn += 1
        self.model_tokens += len(ids)
        if output.finish_reason == "length" and len(piece.response_ids) >= self.budget:
            self.ended_by_budget = True
        finish = "length" if output.finish_reason == "length" else ("tool_calls" if reply.calls else "stop")
        return TurnAnswer(reply, finish, len(plan.context_ids), len(ids))

    def _append_messages(self, piece: _Piece, plan: TurnPlan) -> None:
        ids = plan.appended_ids
        last_version = piece.versions[-1] if piece.versions else 0
        piece.append(ids, [0.0] * len(ids), False, [last_version] * len(ids))
        roles = {m["role"] for m in plan.new_messages}
        piece.turns.append(
            {
                "role": "tool" if roles == {"tool"} else "user",
                "text": plan.appended_text,
                "num_tokens": len(ids),
                "messages": len(plan.new_messages),
            }
        )
        piece.messages.extend(plan.new_messages)
        self.observation_tokens += len(ids)

    def _close_current(self, finish_reason: str) -> None:
        if self.current is not None and self.current.model_turns:
            self.done.append(self.current.close(finish_reason))
        self.current = None

    def close(self, reason: str = "stop") -> list[TrajectoryPiece]:
        """End the session: its pieces in order, the current one closed with ``"length"`` when the session ended by
        budget, else ``reason``. Pieces without a model turn are left out. Later requests raise
        :class:`SessionClosed`; a second close returns []."""
        if self.closed:
            return []
        self.closed = True
        self._close_current("length" if self.ended_by_budget else reason)
        pieces, self.done = self.done, []
        return pieces

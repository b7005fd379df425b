"""The agent gateway's HTTP server: an OpenAI-compatible endpoint per session, in the driver's asyncio loop.

    gateway = AgentGateway(tokenizer, backend, SamplingLimits(temperature, top_p, max_tokens=generate_max_len))
    await gateway.start()                       # uvicorn in the running loop, 127.0.0.1:<free port>
    endpoint = gateway.open_session()           # base_url http://127.0.0.1:<port>/s/<session_id>/v1, its own api_key
    ...                                         # the agent: openai.AsyncOpenAI(base_url=..., api_key=...)
    pieces = gateway.close_session(endpoint.session_id, "stop")
    gateway.stats()                             # counters for agent/* scalars
    await gateway.stop()

Routes under each session's base URL: ``POST /chat/completions`` (``stream`` false or true; a stream is produced
from the finished turn: role, content, tool calls, finish reason, optional usage, ``data: [DONE]``) and
``GET /models``.

Security: the server listens on ``host`` only (127.0.0.1 unless the run's actors are on other nodes). Each session's
key is an HMAC of its id under a per-run secret (``secrets.token_bytes``), sent as ``Authorization: Bearer <key>``.
A wrong or missing key is 401 (so is an unknown session: without the run's secret no valid key exists for it); a
valid key of a session that was closed (its sample ended) is 410, also for a request that was in flight when the
session closed (its turn is dropped). Requests of one session run one at a time in arrival order (a burst waits on
the session's lock, never dropped); sessions run concurrently, their turns batched by the backend.

Added latency: the time a request spends in the gateway's handler minus ``backend.generate`` and minus the wait for
its session's earlier requests (rendering, tokenising, bookkeeping, building the answer). HTTP parsing before the
handler is not counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
import socket
import time
from collections import Counter

from reasonrl.agents.gateway.backend import SamplingLimits, SessionEndpoint, TrajectoryPiece, TurnBackend
from reasonrl.agents.gateway.framing import ChatFraming
from reasonrl.agents.gateway.openai_protocol import (
    STREAM_MEDIA_TYPE,
    ProtocolError,
    completion_body,
    models_body,
    new_completion_id,
    parse_chat_request,
    stream_events,
)
from reasonrl.agents.gateway.sessions import PromptTooLong, Session, SessionClosed

logger = logging.getLogger(__name__)


class AgentGateway:
    """The server of the module docstring.

    Args:
        tokenizer: the policy's tokenizer (its chat template renders requests).
        backend: generates one model turn (:class:`~reasonrl.agents.gateway.backend.TurnBackend`).
        limits: the run's sampling; ``limits.max_tokens`` is the default session budget.
        model: the model name served (``GET /models``; requests may name any model).
        host: the address to listen on; ``public_host`` the one written into base URLs (default: ``host``, or this
            machine's address when ``host`` is ``0.0.0.0``).
        port: 0 picks a free port (:attr:`port` after :meth:`start`).
        secret: the run's secret (bytes); a fresh random one by default.
    """

    def __init__(
        self,
        tokenizer,
        backend: TurnBackend,
        limits: SamplingLimits,
        *,
        model: str = "policy",
        host: str = "127.0.0.1",
        public_host: str | None = None,
        port: int = 0,
        secret: bytes | None = None,
    ):
        self.framing = ChatFraming(tokenizer)
        self.backend = backend
        self.limits = limits
        self.model = model
        self.host = host
        self.public_host = public_host or (socket.gethostbyname(socket.gethostname()) if host == "0.0.0.0" else host)
        self.port = port
        self._secret = secret if secret is not None else secrets.token_bytes(32)
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._next_id = 0
        self._server = None
        self._task: asyncio.Task | None = None
        self._counts: Counter = Counter()
        self._errors: Counter = Counter()
        self._added = [0, 0.0, 0.0]  # requests answered, total and max added seconds
        self._closed_forks = 0

    # -- sessions ---------------------------------------------------------------------------------------------
    def open_session(self, budget: int | None = None) -> SessionEndpoint:
        """A new session with its own base URL and key; ``budget``: response tokens per piece (default and cap: the
        run's ``limits.max_tokens``)."""
        if self._task is None:
            raise RuntimeError("start() the gateway before opening sessions")
        session_id = f"{self._next_id:x}-{secrets.token_hex(4)}"
        self._next_id += 1
        self._sessions[session_id] = Session(session_id, self.framing, self.limits, budget)
        self._locks[session_id] = asyncio.Lock()
        self._counts["sessions_opened"] += 1
        base_url = f"http://{_url_host(self.public_host)}:{self.port}/s/{session_id}/v1"
        return SessionEndpoint(session_id, base_url, self.session_key(session_id), self.model)

    def session_key(self, session_id: str) -> str:
        """The session's API key: HMAC-SHA256 of its id under the run's secret."""
        return hmac.new(self._secret, session_id.encode(), hashlib.sha256).hexdigest()

    def session(self, session_id: str) -> Session | None:
        """The open session (None once closed): R reads ``ended_by_budget`` and ``forks`` from it."""
        return self._sessions.get(session_id)

    def close_session(self, session_id: str, reason: str = "stop") -> list[TrajectoryPiece]:
        """End a session: its trajectory pieces (see :meth:`Session.close`); later requests get 410. Closing an
        unknown or closed session returns []."""
        session = self._sessions.pop(session_id, None)
        self._locks.pop(session_id, None)
        if session is None:
            return []
        self._counts["sessions_closed"] += 1
        self._closed_forks += session.forks
        self._counts["sessions_ended_by_budget"] += int(session.ended_by_budget)
        pieces = session.close(reason)
        self._counts["pieces"] += len(pieces)
        return pieces

    # -- server ---------------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen (in the running loop); the socket is bound here, so a taken port raises ``OSError`` at once."""
        import uvicorn

        if self._task is not None:
            return
        sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        sock.listen(2048)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2
        )
        self._server = _uvicorn_server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="agent-gateway")
        while not self._server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # raises what stopped it
                raise RuntimeError("the agent gateway stopped while starting")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Stop listening; requests still in flight are given 2 s, then cancelled."""
        if self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        except TimeoutError:
            self._server.force_exit = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._task = None

    def stats(self) -> dict[str, float]:
        """Counters since the start, named for ``agent/*`` scalars: requests, forks, 4xx/5xx by status
        (``errors_401``...), model and observation tokens, budget answers, sessions, added latency (mean and max,
        milliseconds)."""
        forks = self._closed_forks + sum(s.forks for s in self._sessions.values())
        out: dict[str, float] = {"requests": self._counts["requests"], "forks": forks}
        for key in (
            "model_tokens",
            "observation_tokens",
            "length_answers",
            "sessions_opened",
            "sessions_closed",
            "sessions_ended_by_budget",
            "pieces",
        ):
            out[key] = self._counts[key]
        for status, n in sorted(self._errors.items()):
            out[f"errors_{status}"] = n
        answered, total, longest = self._added
        if answered:
            out["added_latency_ms_mean"] = 1000 * total / answered
            out["added_latency_ms_max"] = 1000 * longest
        return out

    # -- requests ---------------------------------------------------------------------------------------------
    def _app(self):
        """The ASGI app: FastAPI with plain Starlette endpoints (``request.path_params``; no dependency injection,
        so nothing is read from annotations)."""
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse, StreamingResponse

        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        def error(exc: ProtocolError) -> JSONResponse:
            self._errors[exc.status] += 1
            return JSONResponse(exc.body(), status_code=exc.status)

        async def chat_completions(request):
            try:
                events, body = await self._chat(request.path_params["session_id"], request)
            except ProtocolError as exc:
                return error(exc)
            if events is None:
                return JSONResponse(body)

            async def stream():
                for event in events:
                    yield event

            return StreamingResponse(stream(), media_type=STREAM_MEDIA_TYPE)

        async def models(request):
            try:
                self._authorize(request.path_params["session_id"], request)
            except ProtocolError as exc:
                return error(exc)
            return JSONResponse(models_body(self.model))

        app.add_route("/s/{session_id}/v1/chat/completions", chat_completions, methods=["POST"])
        app.add_route("/s/{session_id}/v1/models", models, methods=["GET"])
        return app

    def _authorize(self, session_id: str, request) -> Session:
        header = request.headers.get("authorization", "")
        key = header[len("Bearer ") :] if header.startswith("Bearer ") else ""
        if not key or not hmac.compare_digest(key, self.session_key(session_id)):
            raise ProtocolError(
                401, "invalid API key for this session", type_="authentication_error", code="invalid_api_key"
            )
        session = self._sessions.get(session_id)
        if session is None:
            raise ProtocolError(410, "this session's sample has ended", code="session_closed")
        return session

    async def _chat(self, session_id: str, request) -> tuple[list[str] | None, dict | None]:
        start = time.perf_counter()
        self._counts["requests"] += 1
        session = self._authorize(session_id, request)
        try:
            payload = await request.json()
        except ValueError:
            raise ProtocolError(400, "the request body is not valid JSON") from None
        parsed = parse_chat_request(payload)
        lock = self._locks.get(session_id)
        if lock is None:
            raise ProtocolError(410, "this session's sample has ended", code="session_closed")
        waited = time.perf_counter()
        async with lock:
            waited = time.perf_counter() - waited
            backend_s = 0.0
            try:
                plan = session.plan(parsed.turn)
            except SessionClosed:
                raise ProtocolError(410, "this session's sample has ended", code="session_closed") from None
            except PromptTooLong as exc:
                raise ProtocolError(400, str(exc), "messages", code="context_length_exceeded") from None
            except Exception as exc:  # the chat template refused the conversation (e.g. its raise_exception)
                message = f"messages: the chat template cannot render them: {type(exc).__name__}: {exc}"
                raise ProtocolError(400, message, "messages") from None
            output = None
            if plan.sampling is not None:
                t0 = time.perf_counter()
                try:
                    output = await self.backend.generate(session_id, plan.turn, plan.context_ids, plan.sampling)
                except Exception as exc:  # the engine failed: the agent sees a 500, the session is unchanged
                    logger.exception("agent gateway: backend.generate failed for session %s", session_id)
                    raise ProtocolError(500, f"generation failed: {type(exc).__name__}") from None
                finally:
                    backend_s = time.perf_counter() - t0
            try:
                answer = session.commit(plan, output)
            except SessionClosed:
                raise ProtocolError(
                    410, "this session's sample ended while the request ran", code="session_closed"
                ) from None
            except ValueError as exc:  # the backend's output is inconsistent: not recorded
                logger.error("agent gateway: session %s: %s", session_id, exc)
                raise ProtocolError(500, f"generation failed: {exc}") from None
        self._counts["model_tokens"] += answer.completion_tokens
        self._counts["observation_tokens"] += len(plan.appended_ids) if output is not None else 0
        self._counts["length_answers"] += int(output is None)
        completion_id = new_completion_id()
        if parsed.stream:
            result = stream_events(answer, self.model, completion_id, parsed.include_usage), None
        else:
            result = None, completion_body(answer, self.model, completion_id)
        added = time.perf_counter() - start - backend_s - waited
        self._added = [self._added[0] + 1, self._added[1] + added, max(self._added[2], added)]
        return result


def _uvicorn_server(config):
    """A ``uvicorn.Server`` without its signal handlers: the run owns SIGINT/SIGTERM (``Server.serve`` would
    otherwise replace the driver's handlers while it serves, and re-raise the signal when it stops)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            yield

    return Server(config)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host

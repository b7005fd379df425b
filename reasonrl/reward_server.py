"""Serve a reasonrl reward over HTTP, for ``reward_url=`` (docs/model_rewards.md, "Remote rewards")::

    export REASONRL_REWARD_SECRET=$(python -c 'import secrets; print(secrets.token_hex(32))')
    python -m reasonrl.reward_server --reward math --port 8123 [field=value ...]
    python -m reasonrl.reward_server --reward code --port 8123 code_workers=8
    python -m reasonrl.reward_server --reward path/to/rewards.py:my_reward --port 8123

``--reward`` is ``math`` (the ORZ rule, math-verify in worker processes), ``exact_match``, ``code`` (unit tests in
the sandbox) or a reward function spec ``file.py:fn`` / ``package.module:fn``. The ``field=value`` arguments are
config fields of the reward (``extract_mode``, ``correct_reward``, ``wrong_reward``, ``require_stop``,
``format_reward``, ``verify_workers``, ``code_*``...), as a run takes them. Every item is scored by that one reward;
an item's ``data_source`` travels but does not pick a verifier here.

Rules (those of the agent gateway, ``reasonrl.agents.gateway.server``): the server listens on 127.0.0.1 unless
``--host`` names another address and ``--allow-remote`` says it is meant (the service spends CPU on whatever it is
sent and, for ``code``, runs programs in the sandbox). Requests must carry ``Authorization: Bearer <secret>``, the
secret read from the environment variable ``--secret-env`` (default ``REASONRL_REWARD_SECRET``); the server refuses
to start without one, unless ``--no-auth`` on a loopback address. Answers: 401 for a missing or wrong secret, 400
naming the item index and field of a malformed item, 413 for more than ``--max-items`` items, 500 when the reward
itself failed. Scoring runs in a worker thread, one batch at a time, so ``GET /health`` answers while a batch runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import ipaddress
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from loguru import logger

from reasonrl.rewards.remote_protocol import (
    HEALTH_PATH,
    PROTOCOL_VERSION,
    SCORE_PATH,
    ProtocolError,
    ScoreItem,
    parse_request,
    result_payload,
)

SECRET_ENV = "REASONRL_REWARD_SECRET"
BUILT_IN = ("math", "exact_match", "code")


class ServerRefused(SystemExit):
    """A start the rules refuse (binding, secret, reward spec): the message says what to do."""

    def __init__(self, message: str):
        super().__init__(f"reward_server: {message}")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_reward(spec: str, overrides: dict[str, str] | None = None):
    """The scorer ``--reward spec`` names, built from a default config with the ``field=value`` overrides (the
    same scorers a run routes to: :mod:`reasonrl.rewards.scorers`)."""
    from reasonrl.config import BasePPOExpConfig
    from reasonrl.rewards.scorers import CodeScorer, ExactMatchScorer, MathScorer, UserFnScorer

    cfg = BasePPOExpConfig().with_overrides(overrides or {})
    if spec == "math":
        return MathScorer(cfg)
    if spec == "exact_match":
        return ExactMatchScorer(cfg.reward_config())
    if spec == "code":
        return CodeScorer(cfg)
    if ":" not in spec:
        raise ServerRefused(f"--reward {spec!r}: use one of {', '.join(BUILT_IN)} or a function file.py:fn")
    return UserFnScorer(spec)


class RewardService:
    """What the HTTP layer calls: a scorer, the item cap, the secret (None: no authentication)."""

    def __init__(self, scorer, *, kind: str, secret: str | None, max_items: int = 1024):
        self.scorer, self.kind, self.max_items = scorer, kind, max_items
        self._secret = secret
        self._lock = threading.Lock()
        self.batches = self.items = 0

    def authorized(self, header: str) -> bool:
        if self._secret is None:
            return True
        key = header[len("Bearer ") :] if header.startswith("Bearer ") else ""
        return bool(key) and hmac.compare_digest(key.encode(), self._secret.encode())

    def check(self, items: Sequence[ScoreItem]) -> None:
        """What the reward itself needs of an item, refused before scoring (400): a code row's ``tests``."""
        if self.kind != "code":
            return
        from reasonrl.rewards.code import parse_tests

        for i, item in enumerate(items):
            if "tests" not in item.row:
                raise ProtocolError("is missing (a code reward runs the row's unit tests)", index=i, field="row.tests")
            try:
                parse_tests(item.row["tests"])
            except (ValueError, TypeError) as exc:
                raise ProtocolError(f"is malformed: {exc}", index=i, field="row.tests") from None

    def score(self, items: Sequence[ScoreItem]) -> list[dict[str, Any]]:
        """The response entries of ``items``, one batch at a time (the scorers are not shared across threads). No
        items, no scoring: that is the client's probe (``RemoteScorer.wait_ready``)."""
        if not items:
            return []
        with self._lock:
            results = self.scorer(list(items), [item.row for item in items])
            self.batches, self.items = self.batches + 1, self.items + len(items)
        return [result_payload(r) for r in results]

    def close(self) -> None:
        self.scorer.close()


def make_app(service: RewardService):
    """The ASGI app: ``POST /v1/score`` and ``GET /health`` (plain Starlette endpoints, as the gateway's)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    def error(status: int, message: str, index: int | None = None, field: str | None = None) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "index": index, "field": field}}, status_code=status)

    async def score(request):
        if not service.authorized(request.headers.get("authorization", "")):
            return error(401, "missing or wrong secret: send Authorization: Bearer <the server's secret>")
        try:
            body = await request.json()
        except ValueError:
            return error(400, "the request body is not valid JSON")
        try:
            items = parse_request(body, service.max_items)
            service.check(items)
        except ProtocolError as exc:
            return JSONResponse(exc.body(), status_code=400)
        except OverflowError as exc:
            return error(413, f"{exc}: send smaller requests (reward_url_batch_size)", field="items")
        try:
            results = await asyncio.to_thread(service.score, items)
        except Exception as exc:  # the reward itself failed: the client retries a 5xx
            logger.opt(exception=exc).error(f"reward_server: scoring a batch of {len(items)} failed")
            return error(500, f"the reward failed: {type(exc).__name__}: {exc}"[:500])
        return JSONResponse({"version": PROTOCOL_VERSION, "results": results})

    async def health(request):
        return JSONResponse({"status": "ok", "reward": service.kind, "version": PROTOCOL_VERSION})

    app.add_route(SCORE_PATH, score, methods=["POST"])
    app.add_route(HEALTH_PATH, health, methods=["GET"])
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (a taken port raises ``OSError`` here, before anything is served)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def check_start(host: str, *, allow_remote: bool, no_auth: bool, secret_env: str, environ=None) -> str | None:
    """The secret to require (None with ``no_auth``), or :class:`ServerRefused` saying why the start is refused."""
    environ = os.environ if environ is None else environ
    local = is_loopback(host)
    if not local and not allow_remote:
        raise ServerRefused(
            f"--host {host} listens beyond this machine: anyone who reaches it could make the server spend CPU (and, "
            "for code, run programs in the sandbox); pass --allow-remote if that is meant (a secret is then required)"
        )
    if no_auth:
        if not local:
            raise ServerRefused(f"--no-auth is for loopback addresses only, not --host {host}")
        return None
    secret = environ.get(secret_env, "")
    if not secret:
        raise ServerRefused(
            f"no secret: export {secret_env}=$(python -c 'import secrets; print(secrets.token_hex(32))') here and "
            f"where the run starts (reward_url_secret_env={secret_env}), or pass --no-auth on a loopback address"
        )
    return secret


class RewardServer:
    """Uvicorn serving :func:`make_app` on a socket bound here; :meth:`start` runs it in a thread (tests, notebooks),
    :meth:`serve` in this thread until a signal (the command line)."""

    def __init__(self, service: RewardService, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self.service, self.host = service, host
        self.sock = bind(host, port)
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(make_app(service), log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{SCORE_PATH}"

    def serve(self) -> None:
        self.server.run(sockets=[self.sock])

    def start(self, timeout_s: float = 10.0) -> RewardServer:
        self.server.capture_signals = contextlib.nullcontext  # the thread's owner keeps its signal handlers
        self._thread = threading.Thread(target=self.serve, name="reward-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the reward server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m reasonrl.reward_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reward", required=True, help="math, exact_match, code, or file.py:fn / package.module:fn")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8123, help="port (0: a free one, printed)")
    parser.add_argument("--allow-remote", action="store_true", help="allow a --host beyond loopback")
    parser.add_argument("--no-auth", action="store_true", help="no secret (loopback addresses only)")
    parser.add_argument("--secret-env", default=SECRET_ENV, help=f"variable holding the secret (default {SECRET_ENV})")
    parser.add_argument("--max-items", type=int, default=1024, help="most items per request (more: 413)")
    parser.add_argument("overrides", nargs="*", metavar="field=value", help="config fields of the reward")
    args = parser.parse_args(argv)
    secret = check_start(args.host, allow_remote=args.allow_remote, no_auth=args.no_auth, secret_env=args.secret_env)
    overrides = {}
    for text in args.overrides:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise ServerRefused(f"{text!r} is not field=value")
        overrides[name] = value
    if args.max_items < 1:
        raise ServerRefused(f"--max-items {args.max_items}: must be >= 1")
    scorer = build_reward(args.reward, overrides)
    wait_ready = getattr(scorer, "wait_ready", None)
    if callable(wait_ready):
        wait_ready()
    service = RewardService(scorer, kind=args.reward, secret=secret, max_items=args.max_items)
    try:
        server = RewardServer(service, args.host, args.port)
        print(f"reward_server: {args.reward} at {server.url} (GET {HEALTH_PATH})", flush=True)
        server.serve()
    finally:
        service.close()


if __name__ == "__main__":
    main(sys.argv[1:])

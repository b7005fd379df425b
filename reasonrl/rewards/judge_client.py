"""``judge_url=``: a judge behind an OpenAI-compatible chat-completions endpoint (vLLM's ``vllm serve``, SGLang, a
hosted API), as the ``generate(prompts) -> texts`` of :class:`reasonrl.rewards.judge.JudgeScorer`.

Each prompt is one request, ``POST {judge_url}/chat/completions`` with ``{"model": judge_model, "messages":
[{"role": "user", "content": prompt}], "max_tokens": judge_max_tokens, "temperature": judge_temperature}``; the
text is ``choices[0].message.content``. The rules are remote rewards' (:mod:`reasonrl.rewards.remote`): at most
``concurrency`` requests in flight, a deadline of ``timeout_s`` for each whole exchange, ``retries`` more tries
after a connection error, a timeout, a 5xx or 429, or an answer without that text, with back-off ``backoff_s *
2**k`` times a jitter in [0.5, 1); a 4xx other than 429 is not retried. A prompt whose request failed for good
gets ``None``: the judge scores it as unparsed and counts it in ``reward/judge_failed`` too (never a silent 0).
The key is read from the environment variable ``judge_url_secret_env`` names, never from a config field.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loguru import logger

from reasonrl.rewards.remote import _run as run_coroutine


@dataclass(frozen=True)
class JudgeUrlSettings:
    """The client's settings (the ``judge_url*`` / ``judge_*`` config fields: :meth:`from_config`)."""

    url: str
    model: str
    max_tokens: int = 256
    temperature: float = 0.0
    concurrency: int = 8
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 0.5
    secret: str | None = None

    @classmethod
    def from_config(cls, cfg, environ: Mapping[str, str] | None = None) -> JudgeUrlSettings:
        environ = os.environ if environ is None else environ
        env = cfg.judge_url_secret_env
        return cls(
            url=cfg.judge_url,
            model=cfg.judge_model,
            max_tokens=cfg.judge_max_tokens,
            temperature=cfg.judge_temperature,
            concurrency=cfg.judge_url_concurrency,
            timeout_s=cfg.judge_url_timeout_s,
            retries=cfg.judge_url_retries,
            secret=environ.get(env) if env else None,
        )

    @property
    def endpoint(self) -> str:
        return self.url.rstrip("/") + "/chat/completions"

    def __repr__(self) -> str:  # the key never reaches a log line
        return (
            f"JudgeUrlSettings(url={self.url!r}, model={self.model!r}, concurrency={self.concurrency}, "
            f"timeout_s={self.timeout_s}, retries={self.retries}, secret={None if self.secret is None else '***'})"
        )


class _Retryable(Exception):
    pass


class _Refused(Exception):
    pass


class JudgeUrlClient:
    """``client(prompts) -> list[str | None]`` (``None``: that request failed for good). ``num_requests``,
    ``num_failed`` and ``num_retries`` count since the start."""

    def __init__(self, settings: JudgeUrlSettings, max_logged_failures: int = 5):
        self.settings = settings
        self.max_logged_failures = max_logged_failures
        self.num_requests = self.num_failed = self.num_retries = 0
        self._lock = threading.Lock()

    def __call__(self, prompts: Sequence[str]) -> list[str | None]:
        if not prompts:
            return []
        return run_coroutine(self._all(list(prompts)))

    async def _all(self, prompts: list[str]) -> list[str | None]:
        import httpx

        s = self.settings
        headers = {"Authorization": f"Bearer {s.secret}"} if s.secret else {}
        limits = httpx.Limits(max_connections=s.concurrency, max_keepalive_connections=s.concurrency)
        gate = asyncio.Semaphore(s.concurrency)
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=s.timeout_s) as client:

            async def one(prompt: str) -> str | None:
                async with gate:
                    return await self._request(client, prompt)

            return await asyncio.gather(*(one(p) for p in prompts))

    async def _request(self, client, prompt: str) -> str | None:
        s = self.settings
        body = {
            "model": s.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
        }
        tries, error = 0, None
        while True:
            tries += 1
            try:
                text = await asyncio.wait_for(self._post(client, body), s.timeout_s)
                self._count(tries - 1, None)
                return text
            except TimeoutError:
                error = f"no answer within judge_url_timeout_s={s.timeout_s}"
            except _Retryable as exc:
                error = str(exc)
            except _Refused as exc:
                self._count(tries - 1, str(exc))
                return None
            if tries > s.retries:
                self._count(tries - 1, error)
                return None
            await asyncio.sleep(s.backoff_s * 2 ** (tries - 1) * random.uniform(0.5, 1.0))

    async def _post(self, client, body: dict) -> str:
        import httpx

        try:
            response = await client.post(self.settings.endpoint, json=body)
        except httpx.HTTPError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status == 429 or status >= 500:
            raise _Retryable(f"HTTP {status}: {response.text[:200]}")
        if status >= 400:
            raise _Refused(f"HTTP {status} (not retried): {response.text[:200]}")
        try:
            text = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Retryable(f"HTTP {status} without choices[0].message.content: {response.text[:80]!r}") from None
        if not isinstance(text, str):
            raise _Retryable(f"choices[0].message.content is a {type(text).__name__}, not text")
        return text

    def _count(self, retries: int, error: str | None) -> None:
        with self._lock:
            self.num_requests += 1
            self.num_retries += retries
            if error is None:
                return
            self.num_failed += 1
            failed = self.num_failed
        if failed <= self.max_logged_failures or failed % 100 == 0:
            logger.warning(
                f"judge_url {self.settings.url}: a request failed after {retries} retries ({error}); its sample "
                f"scores judge_unparsed_reward (reward/judge_failed; {failed} failed so far)"
            )

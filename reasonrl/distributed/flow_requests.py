"""The engine side of fully asynchronous rollouts: the bookkeeping of requests that stay in a vLLM engine across
weight syncs (no vLLM import here; :class:`reasonrl.distributed.vllm_engine.VLLMEngine` feeds it).

A *flow request* is one sample (``n == 1``) that the driver adds with :meth:`VLLMEngine.flow_step` and gets back,
finished, from a later ``flow_step``. vLLM streams each request's new tokens as they are sampled (``DELTA``
outputs); :class:`FlowBook` appends them, each token tagged with the weight version the engine held when it was
sampled, so a response whose generation spans syncs knows which policy sampled which token. Weights change only
between engine steps (the engine steps only inside the actor's calls, and a sync is another call), so the tag is
exact.

Partial rollouts at a sync (``partial_rollout``):

* ``keep``: the request stays in the engine with its KV cache; its next tokens come from the new weights.
* ``recompute``: the request is aborted and resubmitted as ``prompt + tokens so far`` (the new weights re-read
  them in a prefill) with ``max_tokens`` (and ``min_tokens``) reduced by what it already has; the kept tokens,
  their log-probs and versions are those of the policy that sampled them. The resubmitted request draws from a new
  random stream (its seed is the original's + ``RESUBMIT_SEED_STRIDE`` x resubmissions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from reasonrl.dataplane.completion import Completion

RESUBMIT_SEED_STRIDE = 1_000_003
PARTIAL_ROLLOUT_MODES = ("keep", "recompute")


@dataclasses.dataclass
class FlowRequest:
    """One sample the driver adds to an engine's flow: ``key`` names it for the caller (unique among the engine's
    flow requests); ``sampling`` is a ``vllm_engine.SamplingConfig`` with ``n == 1`` and the sample's seed."""

    key: str
    prompt_token_ids: list[int]
    sampling: object


@dataclasses.dataclass
class RunningSample:
    """A flow request in the engine: what it asked, and what it has so far."""

    request: FlowRequest
    request_id: str
    prompt_token_ids: list[int] | None = None  # as the engine saw them (first output)
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    versions: list[int] = dataclasses.field(default_factory=list)
    text: str = ""
    resubmits: int = 0
    cached_prompt_tokens: int | None = None  # prompt tokens the prefix cache served (first output)

    def resubmission(self) -> tuple[list[int], object]:
        """``(prompt ids, sampling)`` of the request that continues this one under ``recompute``: the original
        prompt plus the tokens so far, ``max_tokens`` / ``min_tokens`` reduced by them, a new seed."""
        s = self.request.sampling
        done = len(self.token_ids)
        seed = None if s.seed is None else s.seed + RESUBMIT_SEED_STRIDE * (self.resubmits + 1)
        sampling = dataclasses.replace(
            s, max_tokens=s.max_tokens - done, min_tokens=max(0, s.min_tokens - done), seed=seed
        )
        return list(self.request.prompt_token_ids) + self.token_ids, sampling


class FlowBook:
    """The flow requests of one engine (by vLLM request id) and the finished ones not yet returned."""

    def __init__(self):
        self.running: dict[str, RunningSample] = {}
        self.finished: list[tuple[str, Completion]] = []

    def __len__(self) -> int:
        return len(self.running)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.running

    def add(self, request_id: str, request: FlowRequest, carried: RunningSample | None = None) -> None:
        """Track ``request`` as ``request_id``; ``carried``: the sample a resubmission continues (keeps its tokens)."""
        if carried is None:
            self.running[request_id] = RunningSample(request, request_id)
        else:
            carried.request_id = request_id
            carried.resubmits += 1
            self.running[request_id] = carried

    def on_output(
        self,
        request_id: str,
        *,
        prompt_token_ids: Sequence[int],
        new_token_ids: Sequence[int],
        new_logprobs: Sequence[float] | None,
        new_text: str,
        version: int,
        finished: bool,
        finish_reason: str | None,
        cached_prompt_tokens: int | None = None,
    ) -> None:
        """One step's delta of a flow request: its new tokens (sampled by ``version``), and whether it ended."""
        sample = self.running[request_id]
        if sample.prompt_token_ids is None:
            sample.prompt_token_ids = list(prompt_token_ids)
            sample.cached_prompt_tokens = cached_prompt_tokens
        sample.token_ids += list(new_token_ids)
        if new_logprobs is not None:
            sample.logprobs += list(new_logprobs)
        sample.versions += [version] * len(new_token_ids)
        sample.text += new_text
        if finished:
            del self.running[request_id]
            self.finished.append((sample.request.key, self.completion(sample, str(finish_reason))))

    @staticmethod
    def completion(sample: RunningSample, finish_reason: str) -> Completion:
        """A finished sample as a :class:`Completion` (``prompt_token_ids``: the original prompt as the engine
        saw it, without the tokens a resubmission carried)."""
        s = sample.request.sampling
        prompt = sample.prompt_token_ids if sample.resubmits == 0 else list(sample.request.prompt_token_ids)
        return Completion(
            prompt_index=0,
            sample_index=0,
            prompt_token_ids=list(prompt if prompt is not None else sample.request.prompt_token_ids),
            token_ids=list(sample.token_ids),
            text=sample.text,
            finish_reason=finish_reason,
            logprobs=list(sample.logprobs) if s.logprobs else None,
            token_versions=list(sample.versions),
            cached_prompt_tokens=sample.cached_prompt_tokens,
        )

    def take_finished(self) -> list[tuple[str, Completion]]:
        out, self.finished = self.finished, []
        return out

    def remove(self, request_ids: Sequence[str]) -> list[RunningSample]:
        return [self.running.pop(r) for r in request_ids if r in self.running]

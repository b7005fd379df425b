"""One sampled response as a rollout engine returns it (plain data: no torch, ray or vllm imports here)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Completion:
    """One sampled response to one prompt, as returned by a rollout engine.

    ``token_ids`` are the response tokens only (the prompt is ``prompt_token_ids``). ``logprobs[i]`` is the
    log-probability the sampler gave ``token_ids[i]`` (raw model distribution, before temperature/top-p
    processing, as vLLM's ``raw_logprobs`` mode reports it), or ``None`` when logprobs were not requested.
    ``finish_reason`` is ``"stop"`` (EOS or a stop string) or ``"length"`` (hit ``max_tokens``).
    ``loss_mask[i]`` says whether ``token_ids[i]`` is trained on (False for tokens the policy did not sample, e.g.
    a tool's output inside a multi-turn response); None, what an engine returns, means every token is.
    """

    prompt_index: int
    sample_index: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[float] | None = None
    loss_mask: list[bool] | None = None

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
    turns: list[dict] | None = None  # multi-turn: [{"role", "text", "num_tokens", ...}] in order (dumps, metrics)
    env_reward: float = 0.0  # multi-turn: the environment's per-turn rewards, summed (added to the outcome reward)
    env_error: str | None = None  # multi-turn: why the environment ended this sample early (counted, logged)
    # vision-language prompts: the prompt's images (uint8 [H, W, 3] arrays, in order; set by the generator, not the
    # engine); ``prompt_token_ids`` then hold the image tokens as the engine expanded them
    images: list | None = None
    # fully asynchronous rollouts: the weight version (training steps synced into the engine) that sampled each
    # token of ``token_ids``; None where the engine generated the whole response on one version
    token_versions: list[int] | None = None
    cached_prompt_tokens: int | None = None  # fully asynchronous rollouts: prompt tokens the prefix cache served


@dataclasses.dataclass
class TurnRequest:
    """One model turn of a multi-turn episode, sent to an engine's request pump (``VLLMEngine.pump``).

    ``key`` names the request for the caller (unique among the requests in the engine); ``prompt_token_ids`` is the
    whole conversation so far (prompt, earlier turns, observations); ``sampling`` a ``SamplingConfig`` with
    ``n == 1`` and this turn's seed and ``max_tokens``."""

    key: str
    prompt_token_ids: list[int]
    sampling: object

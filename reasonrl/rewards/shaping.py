"""The ORZ default reward and optional additive shaping terms.

Reward of response i (all terms but the first are off by default)::

    r_i = R_correct * [correct_i and (finish_i == "stop" or not require_stop)]      ORZ's rule
        + R_format  * [format_ok_i]                                                  optional format reward
        + overlong_i                                                                 optional DAPO penalty

Open-Reasoner-Zero gives 1 only when the answer is right *and* generation ended on its own (vLLM finish
reason ``stop``: EOS or a stop string such as ``</answer>``); a response cut at ``max_tokens`` (``length``) gets 0
even if the answer inside it happens to be right. ORZ uses no format reward.

DAPO soft overlong punishment (Yu et al. 2025, eq. 13), with L the response length in tokens, L_max the
generation limit and L_cache the buffer::

    overlong(L) = 0                                                   if L <= L_max - L_cache
                = -factor * (L - (L_max - L_cache)) / L_cache         if L_max - L_cache < L <= L_max
                = -factor                                             if L > L_max

(The same formula as ``reasonrl.algos.dapo.soft_overlong_punishment``, in plain Python so reward code needs no
torch.)

A sample's final reward adds the environment's rewards (multi-turn) and a learned reward model's score to this:
:func:`final_reward`, the one place it is assembled.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reasonrl.rewards.extract import answer_tag_content, last_boxed
from reasonrl.rewards.verifier import RewardVerifier


@dataclass(frozen=True)
class RewardConfig:
    """Options of ``score_responses``.

    Attributes:
        correct_reward: reward for a correct, properly finished response (ORZ: 1.0).
        wrong_reward: reward otherwise (ORZ: 0.0).
        require_stop: only reward responses whose finish reason is ``stop`` (ORZ: True).
        extract_mode: answer extraction mode (``auto`` accepts ``<answer>``/``\\boxed``/``####``/"the answer is";
            ``orz`` requires a ``\\boxed{}`` inside ``<answer></answer>``, as ORZ does).
        format_reward: added when ``format_ok`` holds (0 disables; ORZ uses none).
        overlong_buffer_len: DAPO L_cache in tokens (0 disables the overlong penalty).
        overlong_penalty_factor: DAPO penalty at and beyond ``max_response_length``.
        max_response_length: DAPO L_max in tokens (required when the overlong penalty is on).
    """

    correct_reward: float = 1.0
    wrong_reward: float = 0.0
    require_stop: bool = True
    extract_mode: str = "auto"
    format_reward: float = 0.0
    overlong_buffer_len: int = 0
    overlong_penalty_factor: float = 1.0
    max_response_length: int | None = None


@dataclass
class RewardResult:
    """Reward of one response and why.

    ``reason`` is the verification reason (``correct``/``wrong``/``no_answer``/``timeout``/``error``); ``correct``
    is the verifier's verdict even when the reward is withheld because ``finish_reason != "stop"``
    (``truncated`` is then True).
    """

    reward: float
    correct: bool
    reason: str
    extracted: str | None = None
    finish_reason: str | None = None
    truncated: bool = False
    format_ok: bool = False
    format_bonus: float = 0.0
    overlong_penalty: float = 0.0
    elapsed_s: float = 0.0
    model_score: float = 0.0  # a learned reward model's score of the response (:func:`final_reward` adds it)
    code_verdict: Any = None  # ``reasonrl.rewards.code.CodeVerdict`` of a code row (tests passed/total, status)
    env_reward: float = 0.0  # multi-turn: the environment's per-turn rewards, summed (:func:`final_reward` adds them)
    scored_reward: float | None = None  # the scorer's reward (outcome + shaping), kept once :func:`final_reward` ran
    remote: Any = None  # ``reasonrl.rewards.remote.RemoteOutcome`` of a remotely scored sample (reward/remote_*)
    judge: Any = None  # ``reasonrl.rewards.judge.JudgeVerdict`` of a judged sample (reward/judge_*, judge_text dumps)


_THINK_CLOSE = "</think>"


def format_ok(response: str) -> bool:
    """ORZ/R1-Zero format: reasoning closed by ``</think>``, then exactly one ``<answer>...</answer>`` block
    holding a ``\\boxed{}``, and nothing but whitespace after ``</answer>``.

    The prompt template ends with ``Assistant: <think>``, so a response normally starts inside the think block;
    a leading ``<think>`` in the response is allowed as well.
    """
    think_end = response.find(_THINK_CLOSE)
    if think_end == -1 or response.count(_THINK_CLOSE) != 1 or response.count("<think>") > 1:
        return False
    tail = response[think_end + len(_THINK_CLOSE) :]
    if tail.count("<answer>") != 1 or tail.count("</answer>") != 1:
        return False
    start, end = tail.find("<answer>"), tail.find("</answer>")
    if end < start or tail[:start].strip() or tail[end + len("</answer>") :].strip():
        return False
    return last_boxed(answer_tag_content(tail) or "") is not None


def overlong_penalty(length: int, max_length: int, buffer_len: int, factor: float = 1.0) -> float:
    """DAPO soft overlong punishment for one response length (see the module docstring); <= 0."""
    if not 0 < buffer_len <= max_length:
        raise ValueError(f"need 0 < overlong_buffer_len <= max_response_length, got {buffer_len}, {max_length}")
    exceed = length - (max_length - buffer_len)
    return -factor * min(max(exceed / buffer_len, 0.0), 1.0)


def final_reward(result, *, env_reward: float | None = None, model_score: float | None = None) -> float:
    """A sample's final reward, assembled here and nowhere else; it becomes ``result.reward``, the one number that
    dynamic sampling, the logged reward and the advantages read::

        final   = scored + env_reward + model_score                 (summed left to right)
        scored  = outcome + format_bonus + overlong_penalty         a rule scorer's reward (score_responses,
                                                                    reasonrl.rewards.scorers.shaped_results)
                = the reward function's value                       reward_fn (UserFnScorer) or a custom scorer
        outcome = wrong + s * (correct - wrong) * [finish == "stop" or not require_stop]   (s: rule score in [0, 1])

    ``env_reward`` (multi-turn: the environment's per-turn rewards, summed) and ``model_score`` (the learned reward
    model's score) are 0 unless given. The rollout calls it once a completion is scored (with its ``env_reward``)
    and again once the reward model has scored the batch (with ``model_score``): ``scored`` is taken from
    ``result.reward`` on the first call and kept in ``result.scored_reward``, so each call starts from it. ``result``
    is a :class:`RewardResult` or any object with a ``reward`` attribute (a custom scorer's)."""
    if getattr(result, "scored_reward", None) is None:
        result.scored_reward = float(result.reward)
    if env_reward is not None:
        result.env_reward = env_reward
    if model_score is not None:
        result.model_score = model_score
    result.reward = result.scored_reward + getattr(result, "env_reward", 0.0) + getattr(result, "model_score", 0.0)
    return result.reward


def score_responses(
    responses: Sequence[str],
    golds: Sequence[str],
    finish_reasons: Sequence[str | None],
    *,
    verifier: RewardVerifier,
    response_lengths: Sequence[int] | None = None,
    config: RewardConfig | None = None,
) -> list[RewardResult]:
    """Score a batch of responses with the ORZ rule plus the configured shaping terms.

    Args:
        responses: decoded response texts (prompt excluded).
        golds: gold answers (bare, or full solutions with ``\\boxed{}`` / ``####``).
        finish_reasons: vLLM's ``stop`` / ``length`` per response (anything but ``stop`` counts as truncated).
        verifier: a running ``RewardVerifier`` (hard timeouts, worker processes).
        response_lengths: response lengths in tokens; required when the overlong penalty is enabled.
        config: a ``RewardConfig`` (default: ORZ's rule, no shaping).
    Returns: one ``RewardResult`` per response.
    """
    cfg = config or RewardConfig()
    n = len(responses)
    if len(golds) != n or len(finish_reasons) != n:
        raise ValueError(f"lengths differ: {n} responses, {len(golds)} golds, {len(finish_reasons)} finish reasons")
    use_overlong = cfg.overlong_buffer_len > 0
    if use_overlong:
        if response_lengths is None or cfg.max_response_length is None:
            raise ValueError("the overlong penalty needs response_lengths and config.max_response_length")
        if len(response_lengths) != n:
            raise ValueError(f"{len(response_lengths)} response lengths for {n} responses")
    verdicts = verifier.verify_batch(list(zip(responses, golds, strict=True)), extract_mode=cfg.extract_mode)
    results = []
    for i, v in enumerate(verdicts):
        stopped = finish_reasons[i] == "stop"
        earned = v.correct and (stopped or not cfg.require_stop)
        reward = cfg.correct_reward if earned else cfg.wrong_reward
        fmt = format_ok(responses[i]) if isinstance(responses[i], str) else False
        bonus = cfg.format_reward if (fmt and cfg.format_reward) else 0.0
        penalty = 0.0
        if use_overlong:
            penalty = overlong_penalty(
                int(response_lengths[i]),  # type: ignore[index]
                cfg.max_response_length,  # type: ignore[arg-type]
                cfg.overlong_buffer_len,
                cfg.overlong_penalty_factor,
            )
        results.append(
            RewardResult(
                reward=reward + bonus + penalty,
                correct=v.correct,
                reason=v.reason,
                extracted=v.extracted,
                finish_reason=finish_reasons[i],
                truncated=not stopped,
                format_ok=fmt,
                format_bonus=bonus,
                overlong_penalty=penalty,
                elapsed_s=v.elapsed_s,
            )
        )
    return results


_REFLECTION = re.compile(r"(?i)\b(?:wait|recheck|retry|alternatively|however|let me check|double-check)\b")


def reward_metrics(results: Sequence[RewardResult], responses: Sequence[str] | None = None) -> dict[str, float]:
    """Batch statistics for logging: mean reward, accuracy, finish/format rates, reason fractions, verification
    time, and (with ``responses``) the mean count of reflection words (wait, recheck, alternatively, ...)."""
    n = max(len(results), 1)
    reasons = Counter(r.reason for r in results)
    out = {
        "reward/mean": sum(r.reward for r in results) / n,
        "reward/accuracy": sum(r.correct for r in results) / n,
        "reward/accuracy_stopped": sum(r.correct and not r.truncated for r in results) / n,
        "reward/truncated_frac": sum(r.truncated for r in results) / n,
        "reward/format_ok_frac": sum(r.format_ok for r in results) / n,
        "reward/overlong_penalty_mean": sum(r.overlong_penalty for r in results) / n,
        "reward/verify_time_mean_s": sum(r.elapsed_s for r in results) / n,
        "reward/verify_time_max_s": max((r.elapsed_s for r in results), default=0.0),
    }
    for reason in ("correct", "wrong", "no_answer", "timeout", "error"):
        out[f"reward/reason_{reason}_frac"] = reasons.get(reason, 0) / n
    if responses is not None:
        out["reward/reflection_words_mean"] = sum(len(_REFLECTION.findall(r)) for r in responses) / n
    return out

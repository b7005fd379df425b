"""Rule-checked rewards: answer extraction, bounded math verification, the ORZ reward, shaping terms, repetition
statistics and user reward functions. Never imports ray, deepspeed or vllm (and math-verify only lazily).

Quick start::

    from reasonrl.rewards import RewardVerifier, score_responses

    with RewardVerifier(num_workers=2, timeout_s=5.0) as verifier:
        results = score_responses(responses, golds, finish_reasons, verifier=verifier)
        rewards = [r.reward for r in results]
"""

from reasonrl.rewards.extract import EXTRACT_MODES, Extraction, extract_answer, extract_choice, last_boxed
from reasonrl.rewards.pool import PoolStats, TaskOutcome, TimeoutPool
from reasonrl.rewards.repetition import RepetitionStats, repetition_stats, response_repetition
from reasonrl.rewards.shaping import (
    RewardConfig,
    RewardResult,
    final_reward,
    format_ok,
    overlong_penalty,
    reward_metrics,
    score_responses,
)
from reasonrl.rewards.user_fn import RewardFnSpecError, UserRewardFn, batched_reward, load_reward_fn
from reasonrl.rewards.verifier import RewardVerifier
from reasonrl.rewards.verify import REASONS, VerifyConfig, VerifyResult, answers_match, verify_response

__all__ = [
    "EXTRACT_MODES",
    "REASONS",
    "Extraction",
    "PoolStats",
    "RepetitionStats",
    "RewardConfig",
    "RewardFnSpecError",
    "RewardResult",
    "RewardVerifier",
    "TaskOutcome",
    "TimeoutPool",
    "UserRewardFn",
    "VerifyConfig",
    "VerifyResult",
    "answers_match",
    "batched_reward",
    "extract_answer",
    "extract_choice",
    "final_reward",
    "format_ok",
    "last_boxed",
    "load_reward_fn",
    "overlong_penalty",
    "repetition_stats",
    "response_repetition",
    "reward_metrics",
    "score_responses",
    "verify_response",
]

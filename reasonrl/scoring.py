"""Scorers: turn completions (and their data rows) into ``RewardResult``s for the trainer.

* :class:`MathScorer` (default): ORZ's rule, 1 only when the response finished by itself and math-verify says
  its answer equals the gold, plus the configured shaping terms (format reward, DAPO overlong penalty). The
  verification runs in a pool of worker processes with a hard timeout per item.
* :class:`UserFnScorer`: a user reward function ``file.py:fn`` / ``pkg.mod:fn``. It receives the response
  texts, the gold answers, and per-sample metadata (``finish_reasons``, ``response_lengths``, ``rows``). A sample
  whose function call raises scores 0, and the error is counted and logged; the batch goes on.
"""

from __future__ import annotations

from collections.abc import Sequence

from reasonrl.rewards import RewardResult, RewardVerifier, load_reward_fn, score_responses
from reasonrl.types import Completion


class MathScorer:
    def __init__(self, cfg):
        self.verifier = RewardVerifier(
            num_workers=cfg.verify_workers, timeout_s=cfg.verify_timeout_s, extract_mode=cfg.extract_mode
        )
        self.reward_config = cfg.reward_config()

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        return score_responses(
            [c.text for c in completions],
            [str(row["answer"]) for row in rows],
            [c.finish_reason for c in completions],
            verifier=self.verifier,
            response_lengths=[len(c.token_ids) for c in completions],
            config=self.reward_config,
        )

    def wait_ready(self) -> None:
        """Block until the verification workers are up (``BasePPOExp`` calls it before Ray starts)."""
        self.verifier.wait_ready()

    def close(self) -> None:
        self.verifier.close()


class UserFnScorer:
    """``correct`` is reported as ``reward >= correct_threshold`` (for accuracy logging and pass@k)."""

    def __init__(self, spec: str, correct_threshold: float = 1.0):
        self.fn = load_reward_fn(spec)
        self.correct_threshold = correct_threshold

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        rewards = self.fn(
            [c.text for c in completions],
            [str(row.get("answer", "")) for row in rows],
            finish_reasons=[c.finish_reason for c in completions],
            response_lengths=[len(c.token_ids) for c in completions],
            rows=list(rows),
        )
        return [
            RewardResult(
                reward=r,
                correct=r >= self.correct_threshold,
                reason="user_fn",
                finish_reason=c.finish_reason,
                truncated=c.finish_reason != "stop",
            )
            for r, c in zip(rewards, completions, strict=True)
        ]

    def close(self) -> None:
        pass


def build_scorer(cfg):
    """The scorer the config asks for: ``cfg.reward_fn`` if set, else the ORZ math reward."""
    return UserFnScorer(cfg.reward_fn) if cfg.reward_fn else MathScorer(cfg)

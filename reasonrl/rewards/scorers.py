"""The rule and user scorers a row can be routed to (:mod:`reasonrl.rewards.routing`): each turns completions and their
data rows into ``RewardResult``s.

* :class:`MathScorer`: ORZ's rule, 1 only when the response finished by itself and math-verify says its answer
  equals the gold, plus the configured shaping terms (format reward, DAPO overlong penalty). The verification runs
  in a pool of worker processes with a hard timeout per item.
* :class:`UserFnScorer`: a user reward function ``file.py:fn`` / ``pkg.mod:fn``. It receives the response texts,
  the gold answers, and per-sample metadata (``finish_reasons``, ``response_lengths``, ``rows``). A sample whose
  function call raises scores 0, and the error is counted and logged; the batch goes on.
* :class:`ExactMatchScorer`: the extracted answer equals the gold after light normalisation (:func:`exact_key`).
* :class:`CodeScorer`: unit tests of the model's program, run in ``reasonrl.sandbox`` (``reasonrl.rewards.code``).
* reasoning-gym's own ``score_answer``: :class:`reasonrl.rewards.gym.GymRowScorer`.

Every rule score ``s`` in [0, 1] is shaped the same way (:func:`shaped_results`); a completion is anything with
``text``, ``finish_reason`` and ``token_ids`` (``reasonrl.dataplane.completion.Completion``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from reasonrl.rewards.extract import extract_answer
from reasonrl.rewards.normalize import clean_latex, unwrap_text
from reasonrl.rewards.shaping import RewardConfig, RewardResult, format_ok, overlong_penalty, score_responses
from reasonrl.rewards.user_fn import load_reward_fn
from reasonrl.rewards.verifier import RewardVerifier

if TYPE_CHECKING:
    from reasonrl.dataplane.completion import Completion


class MathScorer:
    def __init__(self, cfg):
        self.verifier = RewardVerifier(
            num_workers=cfg.verify_workers,
            timeout_s=cfg.verify_timeout_s,
            extract_mode=cfg.extract_mode,
            batch_timeout_s=cfg.verify_batch_timeout_s,
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


def shaped_results(
    completions: Sequence[Completion],
    scores: Sequence[float],
    reasons: Sequence[str],
    extracted: Sequence[str | None],
    config: RewardConfig,
    elapsed_s: Sequence[float] | None = None,
) -> list[RewardResult]:
    """``RewardResult``s of rule scores ``s_i`` in [0, 1], with the shaping terms of ``score_responses``::

        r_i = wrong + s_i * (correct - wrong) * [finish_i == "stop" or not require_stop]
              + format_reward * [format_ok_i] + overlong_i

    ``correct`` is ``s_i >= 1``; ``reasons[i]`` is ``correct/wrong/no_answer/timeout/error``."""
    out = []
    for i, c in enumerate(completions):
        stopped = c.finish_reason == "stop"
        earned = scores[i] if (stopped or not config.require_stop) else 0.0
        fmt = format_ok(c.text)
        bonus = config.format_reward if (fmt and config.format_reward) else 0.0
        penalty = 0.0
        if config.overlong_buffer_len > 0:
            if config.max_response_length is None:
                raise ValueError("the overlong penalty needs config.max_response_length")
            penalty = overlong_penalty(
                len(c.token_ids),
                config.max_response_length,
                config.overlong_buffer_len,
                config.overlong_penalty_factor,
            )
        base = config.wrong_reward + earned * (config.correct_reward - config.wrong_reward)
        out.append(
            RewardResult(
                reward=base + bonus + penalty,
                correct=scores[i] >= 1.0,
                reason=reasons[i],
                extracted=extracted[i],
                finish_reason=c.finish_reason,
                truncated=not stopped,
                format_ok=fmt,
                format_bonus=bonus,
                overlong_penalty=penalty,
                elapsed_s=0.0 if elapsed_s is None else elapsed_s[i],
            )
        )
    return out


def exact_key(answer: str) -> str:
    """What ``exact_match`` compares: the answer with math delimiters, LaTeX spacing and ``\\text{}`` wrappers
    removed, whitespace collapsed, case folded (``$\\text{Yes}$`` and ``yes`` match; ``0.5`` and ``1/2`` do not)."""
    return " ".join(unwrap_text(clean_latex(answer)).split()).casefold()


class ExactMatchScorer:
    """1 when the extracted answer (``extract_mode``) equals the gold under :func:`exact_key`; in this process
    (string work only, linear in the response length), with the shaping of ``RewardConfig``."""

    def __init__(self, reward_config: RewardConfig):
        self.reward_config = reward_config

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        scores, reasons, extracted, elapsed = [], [], [], []
        for c, row in zip(completions, rows, strict=True):
            start = time.perf_counter()
            answer = extract_answer(c.text, self.reward_config.extract_mode).answer
            ok = answer is not None and exact_key(answer) == exact_key(str(row["answer"]))
            scores.append(1.0 if ok else 0.0)
            reasons.append("correct" if ok else ("no_answer" if answer is None else "wrong"))
            extracted.append(answer)
            elapsed.append(time.perf_counter() - start)
        return shaped_results(completions, scores, reasons, extracted, self.reward_config, elapsed)

    def close(self) -> None:
        pass


class CodeScorer:
    """Rows with ``data_source: code``: the program of each completion (:func:`extract_code`) runs against its row's
    ``tests`` in the sandbox (:func:`check_programs`, one batch in parallel under ``code_batch_timeout_s``). The rule
    score is ``1`` when every test passes (``code_reward=all``) or the passed fraction (``fraction``), shaped as the
    other rule scores (:func:`shaped_results`: nothing unless the response stopped by itself). ``reason`` is
    ``correct`` or the verdict's status (``wrong``/``error``/``timeout``/``killed``); ``code_verdict`` keeps the
    verdict for the ``reward/code_*`` metrics."""

    def __init__(self, cfg):
        from reasonrl.rewards.code import REWARD_MODES
        from reasonrl.sandbox import Sandbox, namespaces_available

        self.reward_config = cfg.reward_config()
        self.code_config = cfg.code_reward_config()
        if self.code_config.reward not in REWARD_MODES:
            raise ValueError(f"code_reward must be one of {REWARD_MODES}, got {self.code_config.reward!r}")
        if self.code_config.isolate == "ns" and not namespaces_available():
            raise ValueError(
                "code_isolate='ns' but this kernel refuses unprivileged user namespaces: allow them "
                "(sysctl kernel.unprivileged_userns_clone=1) or set code_isolate=auto (limits only, see docs)"
            )
        self.sandbox = Sandbox(workers=self.code_config.workers)

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        from reasonrl.rewards.code import check_programs, extract_code

        programs = [extract_code(c.text) for c in completions]
        pairs = [(program, row["tests"]) for program, row in zip(programs, rows, strict=True)]
        verdicts = check_programs(pairs, config=self.code_config, sandbox=self.sandbox)
        scores = [v.reward(self.code_config.reward) for v in verdicts]
        reasons = ["correct" if v.status == "passed" else v.status for v in verdicts]
        elapsed = [v.elapsed_s for v in verdicts]
        results = shaped_results(completions, scores, reasons, programs, self.reward_config, elapsed)
        for result, verdict in zip(results, verdicts, strict=True):
            result.code_verdict = verdict  # correct (score 1) already means every test passed, in both modes
        return results

    def close(self) -> None:
        pass

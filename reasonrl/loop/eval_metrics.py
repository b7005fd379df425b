"""Evaluation metrics over several sampled answers per prompt: ``pass@k``, ``avg@k``, ``maj@k`` (pure Python).

- ``pass@k``: probability that at least one of ``k`` samples is correct, estimated without bias from ``n >= k``
  samples of which ``c`` are correct (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"):
  ``1 - C(n-c, k) / C(n, k)``, averaged over prompts.
- ``avg@k``: mean accuracy over ``k`` samples per prompt, averaged over prompts (the paper-style "avg@16").
  With ``n > k`` samples the mean over all ``n`` is used, an unbiased (lower-variance) estimate of the same number.
- ``maj@k``: accuracy of the majority vote over ``k`` samples' extracted answers (self-consistency, Wang et al.
  2022; reported by verl and Skywork-OR1): :func:`maj_at_k`. Deterministic: no bootstrap.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from reasonrl.rewards.normalize import clean_latex, parse_number, unwrap_text


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased ``pass@k`` for one prompt with ``n`` samples, ``c`` of them correct.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``, which equals ``1 - C(n-c, k)/C(n, k)`` without huge
    binomials. Raises ``ValueError`` unless ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"pass_at_k: {name} must be an int, got {value!r}")
    if n < 1:
        raise ValueError(f"pass_at_k: need n >= 1 samples, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n} (cannot estimate pass@{k} from {n} samples)")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def avg_at_k(scores_per_prompt: Sequence[Sequence[float]]) -> float:
    """Mean over prompts of the mean score over that prompt's samples (booleans count as 0/1)."""
    if len(scores_per_prompt) == 0:
        raise ValueError("avg_at_k: no prompts")
    means = []
    for i, scores in enumerate(scores_per_prompt):
        if len(scores) == 0:
            raise ValueError(f"avg_at_k: prompt {i} has no samples")
        means.append(math.fsum(float(s) for s in scores) / len(scores))
    return math.fsum(means) / len(means)


def answer_vote_key(answer: str | None) -> str | None:
    """The key an extracted answer votes with in :func:`maj_at_k`: None for no (or a blank) answer; a plain number
    as its exact value (``0.5``, ``1/2`` and ``\\frac{1}{2}`` vote together: ``"1/2"``); anything else after the
    value-preserving LaTeX clean-up of the verifier (``clean_latex``, ``\\text{}`` unwrapped), spaces removed."""
    if answer is None:
        return None
    cleaned = clean_latex(unwrap_text(str(answer)))
    if not cleaned:
        return None
    number = parse_number(cleaned)
    return str(number) if number is not None else "".join(cleaned.split())


def majority_vote(answers: Sequence[str | None]) -> int | None:
    """Index of the sample whose answer wins the vote among ``answers`` (None entries do not vote); None if no
    sample voted. Ties go to the answer whose first vote comes earliest; the winner is that first sample."""
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for i, answer in enumerate(answers):
        if answer is not None:
            counts[answer] = counts.get(answer, 0) + 1
            first.setdefault(answer, i)
    if not counts:
        return None
    winner = max(counts, key=lambda a: (counts[a], -first[a]))
    return first[winner]


def maj_at_k(
    per_prompt_answers: Sequence[Sequence[str | None]], per_prompt_correct: Sequence[Sequence[bool]], k: int
) -> float:
    """``maj@k``: mean over prompts of the correctness of the majority answer of ``k`` samples.

    For one group of ``k`` samples with vote keys ``a_1..a_k`` (None: no extracted answer, no vote) and verdicts
    ``v_1..v_k``: ``i* = majority_vote(a)`` (most votes; a tie goes to the answer voted first) and the group scores
    ``v_{i*}`` (0 when no sample voted). A prompt with ``n >= k`` samples is split, in sample order, into
    ``floor(n / k)`` disjoint groups of ``k`` (the ``n mod k`` last samples are left out) and scores the mean of its
    groups: ``maj@k = mean_prompts mean_groups v_{i*(group)}``. With ``n == k`` that is one vote over all samples.
    Answers should be vote keys (:func:`answer_vote_key`). Raises ``ValueError`` on mismatched lengths or ``n < k``.
    """
    if len(per_prompt_answers) != len(per_prompt_correct):
        raise ValueError(f"maj_at_k: {len(per_prompt_answers)} answer lists for {len(per_prompt_correct)} prompts")
    if len(per_prompt_correct) == 0:
        raise ValueError("maj_at_k: no prompts")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"maj_at_k: need an int k >= 1, got {k!r}")
    scores = []
    for i, (answers, correct) in enumerate(zip(per_prompt_answers, per_prompt_correct, strict=True)):
        if len(answers) != len(correct):
            raise ValueError(f"maj_at_k: prompt {i} has {len(answers)} answers for {len(correct)} verdicts")
        if len(correct) < k:
            raise ValueError(f"maj_at_k: prompt {i} has {len(correct)} samples, fewer than k={k}")
        groups = []
        for start in range(0, len(correct) - k + 1, k):
            winner = majority_vote(answers[start : start + k])
            groups.append(0.0 if winner is None else float(bool(correct[start + winner])))
        scores.append(math.fsum(groups) / len(groups))
    return math.fsum(scores) / len(scores)


def vote_keys(results: Sequence) -> list[str | None] | None:
    """:func:`answer_vote_key` of each scorer result's ``extracted`` answer, or None when the scorer extracts no
    answers to vote on (a user reward function: ``reason`` is ``user_fn``; a code row: ``code_verdict`` is set and
    ``extracted`` is a program; a reward service that sent no ``info.extracted``): then ``maj@k`` is not reported."""
    if all(_no_vote(r) for r in results):
        return None
    return [answer_vote_key(getattr(r, "extracted", None)) for r in results]


def _no_vote(result) -> bool:
    """A result without an answer to vote on (:func:`vote_keys`)."""
    if getattr(result, "reason", None) == "user_fn" or getattr(result, "code_verdict", None) is not None:
        return True
    return getattr(result, "remote", None) is not None and getattr(result, "extracted", None) is None


def summarize_eval(
    per_prompt_correct: Sequence[Sequence[bool]],
    k: int,
    per_prompt_answers: Sequence[Sequence[str | None]] | None = None,
) -> dict[str, float | int]:
    """``{"avg@k": ..., "pass@k": ..., "num_prompts": ...}`` (keys spelled with the number, e.g. ``avg@4``), plus
    ``maj@k`` (:func:`maj_at_k`) when ``per_prompt_answers`` (vote keys, None = no answer) are given.

    Every prompt needs at least ``k`` samples (prompts may have different counts ``n >= k``).
    """
    if len(per_prompt_correct) == 0:
        raise ValueError("summarize_eval: no prompts")
    passes = []
    for i, correct in enumerate(per_prompt_correct):
        if len(correct) < k:
            raise ValueError(f"summarize_eval: prompt {i} has {len(correct)} samples, fewer than k={k}")
        passes.append(pass_at_k(len(correct), sum(bool(x) for x in correct), k))
    out: dict[str, float | int] = {
        f"avg@{k}": avg_at_k([[bool(x) for x in correct] for correct in per_prompt_correct]),
        f"pass@{k}": math.fsum(passes) / len(passes),
    }
    if per_prompt_answers is not None:
        out[f"maj@{k}"] = maj_at_k(per_prompt_answers, per_prompt_correct, k)
    out["num_prompts"] = len(per_prompt_correct)
    return out


def eval_scalars(dataset: str, summary: dict[str, float | int]) -> dict[str, float]:
    """Prefix a :func:`summarize_eval` result for logging: ``{"eval/<dataset>/avg@4": ..., ...}``."""
    if not dataset or "/" in dataset:
        raise ValueError(f"eval_scalars: dataset name must be non-empty without '/', got {dataset!r}")
    return {f"eval/{dataset}/{name}": float(value) for name, value in summary.items()}

"""Evaluation metrics over several sampled answers per prompt: ``pass@k`` and ``avg@k`` (pure Python, no deps).

- ``pass@k``: probability that at least one of ``k`` samples is correct, estimated without bias from ``n >= k``
  samples of which ``c`` are correct (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"):
  ``1 - C(n-c, k) / C(n, k)``, averaged over prompts.
- ``avg@k``: mean accuracy over ``k`` samples per prompt, averaged over prompts (the paper-style "avg@16").
  With ``n > k`` samples the mean over all ``n`` is used, an unbiased (lower-variance) estimate of the same number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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


def summarize_eval(per_prompt_correct: Sequence[Sequence[bool]], k: int) -> dict[str, float | int]:
    """``{"avg@k": ..., "pass@k": ..., "num_prompts": ...}`` (keys spelled with the number, e.g. ``avg@4``).

    Every prompt needs at least ``k`` samples (prompts may have different counts ``n >= k``).
    """
    if len(per_prompt_correct) == 0:
        raise ValueError("summarize_eval: no prompts")
    passes = []
    for i, correct in enumerate(per_prompt_correct):
        if len(correct) < k:
            raise ValueError(f"summarize_eval: prompt {i} has {len(correct)} samples, fewer than k={k}")
        passes.append(pass_at_k(len(correct), sum(bool(x) for x in correct), k))
    return {
        f"avg@{k}": avg_at_k([[bool(x) for x in correct] for correct in per_prompt_correct]),
        f"pass@{k}": math.fsum(passes) / len(passes),
        "num_prompts": len(per_prompt_correct),
    }


def eval_scalars(dataset: str, summary: dict[str, float | int]) -> dict[str, float]:
    """Prefix a :func:`summarize_eval` result for logging: ``{"eval/<dataset>/avg@4": ..., ...}``."""
    if not dataset or "/" in dataset:
        raise ValueError(f"eval_scalars: dataset name must be non-empty without '/', got {dataset!r}")
    return {f"eval/{dataset}/{name}": float(value) for name, value in summary.items()}

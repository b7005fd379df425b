"""Repetition statistics of responses, for logging (a policy that starts looping shows up here first).

Per response, over its whitespace-separated words (the last ``max_words`` of them, to bound the cost)::

    max_ngram_count = the largest number of times any n-gram occurs
    rep_ratio       = 1 - (#distinct n-grams) / (#n-grams)        ("rep-n", Welleck et al. 2019)
    looping         = max_ngram_count >= min_repeats

With the defaults (n = 10 words, 3 occurrences) ordinary reasoning text almost never counts as looping, while a
model stuck repeating a sentence does. N-grams are compared through 64-bit hashes of the words (numpy), about
0.1 microsecond per word; a hash collision can only overstate a count and is vanishingly rare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_MULT = np.uint64(0x9E3779B97F4A7C15)


@dataclass
class RepetitionStats:
    """Repetition figures of one response (see the module docstring)."""

    num_words: int
    max_ngram_count: int
    rep_ratio: float
    looping: bool


def ngram_hashes(words: Sequence[str], n: int) -> np.ndarray:
    """uint64 hash of every n-gram of ``words`` (empty when there are fewer than n words)."""
    if len(words) < n:
        return np.zeros(0, dtype=np.uint64)
    h = np.fromiter((hash(w) for w in words), dtype=np.int64, count=len(words)).view(np.uint64)
    m = len(words) - n + 1
    out = np.zeros(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            out = out * _MULT + h[k : k + m]
    return out


def response_repetition(text: str, n: int = 10, min_repeats: int = 3, max_words: int = 4096) -> RepetitionStats:
    """Repetition statistics of one response (see the module docstring)."""
    words = text.split()[-max_words:]
    grams = ngram_hashes(words, n)
    if grams.size == 0:
        return RepetitionStats(len(words), 0, 0.0, False)
    _, counts = np.unique(grams, return_counts=True)
    top = int(counts.max())
    return RepetitionStats(len(words), top, 1.0 - counts.size / grams.size, top >= min_repeats)


def repetition_stats(
    responses: Sequence[str], n: int = 10, min_repeats: int = 3, max_words: int = 4096
) -> dict[str, float]:
    """Batch figures for logging: ``repetition/looping_frac`` (fraction of responses with an n-gram repeated at
    least ``min_repeats`` times), ``repetition/max_ngram_count_mean`` and ``_max``, ``repetition/rep_ratio_mean``.
    """
    stats = [response_repetition(r, n, min_repeats, max_words) for r in responses]
    k = max(len(stats), 1)
    return {
        "repetition/looping_frac": sum(s.looping for s in stats) / k,
        "repetition/max_ngram_count_mean": sum(s.max_ngram_count for s in stats) / k,
        "repetition/max_ngram_count_max": float(max((s.max_ngram_count for s in stats), default=0)),
        "repetition/rep_ratio_mean": sum(s.rep_ratio for s in stats) / k,
    }

"""Reward of the step benchmark (``benchmarks/bench_grpo_step.py``): 1.0 when the completion contains the right
integer as a whole number (not as part of a longer number), else 0.0."""

from __future__ import annotations

import re


def reward(response: str, gold: str, **meta) -> float:
    return float(re.search(rf"(?<!\d){re.escape(str(gold).strip())}(?!\d)", response) is not None)

"""A reward that even a random-init model earns in part: for pipeline checks of the full loop.

The tiny CPU recipes (``playground/tiny_*_cpu.py``) run a random model that never answers a math question, so the
math reward is 0 for every sample, every advantage is 0 and nothing trains. With this reward the samples of a
prompt usually differ (measured: 9 of 10 steps of ``tiny_grpo_cpu max_steps=10 actor_lr=5e-5`` had a non-zero
signal, mean reward 0.002-0.019), so the advantages, losses and gradients of every phase are exercised. It is far
too sparse for the random model to learn much in a few steps, and it measures nothing about reasoning: use it to
check a set-up; for a CPU run that learns, see ``arith_grpo_cpu`` (``make demo``).
"""

from __future__ import annotations


def digit_fraction(response: str, gold: str = "", **meta) -> float:
    """Fraction of the response's characters that are digits, in [0, 1] (0 for an empty response)."""
    return sum(ch.isdigit() for ch in response) / len(response) if response else 0.0

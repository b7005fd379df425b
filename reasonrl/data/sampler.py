"""Deterministic, resumable prompt batches: episode ``e`` visits the rows in a permutation seeded by (seed, e).

The sampler's whole state is ``(episode, position)``, saved with every checkpoint, so a resumed run draws exactly
the batches the uninterrupted run would have drawn.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Any


def _episode_seed(seed: int, episode: int) -> int:
    digest = hashlib.sha256(f"reasonrl-sampler:{seed}:{episode}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


class PromptSampler:
    """Batches of ``batch_size`` rows; the last incomplete batch of an episode is dropped.

    ``num_episodes`` passes over the data; ``next_batch()`` returns None when they are used up.
    """

    def __init__(self, rows: Sequence[dict[str, Any]], batch_size: int, seed: int, num_episodes: int = 1):
        if batch_size <= 0 or batch_size > len(rows):
            raise ValueError(
                f"rollout_batch_size={batch_size} must be between 1 and the number of training rows ({len(rows)})"
            )
        self.rows, self.batch_size, self.seed, self.num_episodes = list(rows), batch_size, seed, num_episodes
        self.episode, self.position = 0, 0
        self._order = self._permutation(0)

    @property
    def steps_per_episode(self) -> int:
        return len(self.rows) // self.batch_size

    @property
    def total_steps(self) -> int:
        return self.steps_per_episode * self.num_episodes

    def _permutation(self, episode: int) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(_episode_seed(self.seed, episode)).shuffle(order)
        return order

    def next_batch(self) -> list[dict[str, Any]] | None:
        if self.position + self.batch_size > len(self.rows):
            self.episode, self.position = self.episode + 1, 0
            self._order = self._permutation(self.episode)
        if self.episode >= self.num_episodes:
            return None
        idx = self._order[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return [self.rows[i] for i in idx]

    def state_dict(self) -> dict[str, int]:
        return {"episode": self.episode, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.episode, self.position = int(state["episode"]), int(state["position"])
        self._order = self._permutation(self.episode)

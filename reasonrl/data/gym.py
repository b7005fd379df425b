"""reasoning-gym tasks (countdown, basic_arithmetic, ...) as an optional procedural data source with scorers.

    source = GymSource("countdown", size=1000, seed=0)
    rows = source.rows()                                  # normalised rows; row["gym"] identifies the entry
    with GymScorer(num_workers=2, timeout_s=5.0) as scorer:
        scores = scorer.score(responses, rows)            # floats in [0, 1], hard-timeout workers

``reasoning_gym`` (``pip install reasoning-gym==0.1.25``, the ``gym`` extra) is imported lazily. A row carries
``{"gym": {"name", "seed", "size", "config", "index"}}``, enough to regenerate its entry deterministically where it
is scored; which tasks' scorers are guarded or refused, and why, is said in :mod:`reasonrl.rewards.gym`.

The scoring side (``GymScorer``, ``score_gym_item``, the task lists) is :mod:`reasonrl.rewards.gym`, re-exported here;
this module generates the rows.
"""

from __future__ import annotations

import json
from typing import Any

from reasonrl.rewards.gym import (  # the scoring side, re-exported: GymScorer and score_gym_item live in rewards/
    GUARDED_TASKS,
    UNSAFE_TASKS,
    GymNotInstalled,
    GymScorer,
    gym_answer,
    gym_dataset,
    reasoning_gym_module,
    score_gym_item,
)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class GymSource:
    """A reasoning-gym dataset as normalised rows.

    Args:
        name: a reasoning-gym dataset name (``countdown``, ``basic_arithmetic``, ``puzzle24``, ...).
        size, seed: dataset size and seed (the same pair always yields the same rows).
        allow_unsafe_scorer: permit tasks whose scorer evaluates the answer without a whitelist (see module doc).
        **config: task options passed to ``reasoning_gym.create_dataset`` (must be JSON-serialisable).
    """

    def __init__(self, name: str, size: int = 1000, seed: int = 0, allow_unsafe_scorer: bool = False, **config: Any):
        if name in UNSAFE_TASKS and not allow_unsafe_scorer:
            raise ValueError(
                f"reasoning-gym task {name!r} scores answers with eval/parse_expr on model output; "
                "pass allow_unsafe_scorer=True to use it anyway"
            )
        self.name, self.size, self.seed = name, int(size), int(seed)
        self.config_json = json.dumps(config, sort_keys=True)
        self.dataset = gym_dataset(self.name, self.size, self.seed, self.config_json)

    def __len__(self) -> int:
        return self.size

    def row(self, index: int) -> dict[str, Any]:
        entry = self.dataset[index]
        return {
            "id": f"gym/{self.name}/{self.seed}/{index}",
            "question": entry["question"],
            "answer": str(entry["answer"]),
            "source": f"reasoning_gym:{self.name}",
            "gym": {
                "name": self.name,
                "seed": self.seed,
                "size": self.size,
                "config": self.config_json,
                "index": index,
            },
            "metadata": {k: _jsonable(v) for k, v in entry.get("metadata", {}).items()},
        }

    def rows(self) -> list[dict[str, Any]]:
        return [self.row(i) for i in range(self.size)]


_reasoning_gym = reasoning_gym_module  # the name data's callers used
__all__ = [
    "GUARDED_TASKS",
    "UNSAFE_TASKS",
    "GymNotInstalled",
    "GymScorer",
    "GymSource",
    "gym_answer",
    "score_gym_item",
]

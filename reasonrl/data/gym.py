"""reasoning-gym tasks (countdown, basic_arithmetic, ...) as an optional procedural data source with scorers.

    source = GymSource("countdown", size=1000, seed=0)
    rows = source.rows()                                  # normalised rows; row["gym"] identifies the entry
    with GymScorer(num_workers=2, timeout_s=5.0) as scorer:
        scores = scorer.score(responses, rows)            # floats in [0, 1], hard-timeout workers

``reasoning_gym`` (``pip install reasoning-gym==0.1.25``, the ``gym`` extra) is imported lazily. A row carries
``{"gym": {"name", "seed", "size", "config", "index"}}``, enough to regenerate its entry deterministically in a
worker process, where ``dataset.score_answer(answer, entry)`` scores the extracted answer.

Safety: several reasoning-gym scorers pass the answer to ``eval`` or sympy's ``parse_expr`` (in 0.1.25:
countdown, puzzle24, binary_matrix, spiral_matrix, string_insertion, n_queens, simple_integration,
intermediate_integration, polynomial_multiplication). For countdown and puzzle24 the answer must first match an
arithmetic whitelist (digits, + - * / ( ) and spaces, no ``**``), otherwise it scores 0. The other listed tasks
are refused unless ``allow_unsafe_scorer=True``. All scoring runs in ``RewardVerifier`` worker processes under
the hard timeout (``GymScorer`` workers import reasoning-gym before they take work, so the 1-2 s import never
counts against an item's timeout).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from reasonrl.rewards.extract import extract_answer
from reasonrl.rewards.pool import TaskOutcome, TimeoutPool

ARITHMETIC_ONLY = re.compile(r"[0-9+\-*/()\s.]{1,200}")
GUARDED_TASKS = {"countdown": ARITHMETIC_ONLY, "puzzle24": ARITHMETIC_ONLY}
UNSAFE_TASKS = frozenset(
    {
        "binary_matrix",
        "spiral_matrix",
        "string_insertion",
        "n_queens",
        "simple_integration",
        "intermediate_integration",
        "polynomial_multiplication",
    }
)


class GymNotInstalled(ImportError):
    """reasoning-gym is not installed."""


def _reasoning_gym():
    try:
        import reasoning_gym
    except ImportError as exc:
        raise GymNotInstalled(
            "reasoning-gym is not installed: `pip install reasoning-gym==0.1.25` (the 'gym' extra of reasonrl)"
        ) from exc
    return reasoning_gym


@lru_cache(maxsize=64)
def _dataset(name: str, size: int, seed: int, config_json: str):
    return _reasoning_gym().create_dataset(name, size=size, seed=seed, **json.loads(config_json))


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
        self.dataset = _dataset(self.name, self.size, self.seed, self.config_json)

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


def gym_answer(response: str, extract_mode: str = "auto") -> str | None:
    """The answer text of a response: ``<answer>`` content, ``\\boxed{}``, ``####`` or "the answer is"."""
    return extract_answer(response, extract_mode).answer


def score_gym_item(item: tuple[str, dict[str, Any], str]) -> float:
    """Pool task: ``(response, gym_ref, extract_mode)`` -> ``dataset.score_answer`` of the extracted answer.

    ``gym_ref`` is a row's ``gym`` field: the entry is regenerated from name, size, seed, config and index (a row's
    own text never reaches the task's scorer, some of which eval entry fields). Returns 0.0 when there is no answer
    or it fails the task's whitelist.
    """
    response, ref, extract_mode = item
    answer = gym_answer(response, extract_mode)
    if answer is None:
        return 0.0
    guard = GUARDED_TASKS.get(ref["name"])
    if guard is not None and (not guard.fullmatch(answer) or "**" in answer):
        return 0.0
    dataset = _dataset(ref["name"], int(ref["size"]), int(ref["seed"]), ref["config"])
    return float(dataset.score_answer(answer, dataset[int(ref["index"])]))  # the entry is regenerated, never given


def _init_worker() -> None:
    _reasoning_gym()


class GymScorer:
    """Scores responses to gym rows in hard-timeout worker processes (see ``reasonrl.rewards.pool``).

    Args:
        num_workers, timeout_s, memory_limit_mb: as for ``RewardVerifier``.
        extract_mode: how the answer is taken from a response (``auto``: ``<answer>``, ``\\boxed{}``, ...).
    A timeout, error or missing answer scores 0.
    """

    def __init__(
        self,
        num_workers: int | None = None,
        timeout_s: float = 5.0,
        *,
        extract_mode: str = "auto",
        memory_limit_mb: int | None = 4096,
    ):
        _reasoning_gym()  # fail here, with the install hint, rather than in a worker
        self.extract_mode = extract_mode
        self.pool = TimeoutPool(num_workers, timeout_s, initializer=_init_worker, memory_limit_mb=memory_limit_mb)

    def score(self, responses: Sequence[str], rows: Sequence[dict[str, Any]]) -> list[float]:
        """One score in [0, 1] per (response, row) pair."""
        if len(responses) != len(rows):
            raise ValueError(f"{len(responses)} responses but {len(rows)} rows")
        refs = []
        for row in rows:
            if "gym" not in row:
                raise ValueError(f"row {row.get('id', '?')!r} is not a reasoning-gym row (no 'gym' field)")
            refs.append(row["gym"])
        return [float(o.value) if o.status == "ok" else 0.0 for o in self.score_refs(responses, refs)]

    def score_refs(self, responses: Sequence[str], refs: Sequence[dict[str, Any]]) -> list[TaskOutcome]:
        """The pool outcome of each (response, gym reference) pair: ``status`` ``ok`` (``value`` the score),
        ``timeout`` or ``error``."""
        items = [(r, ref, self.extract_mode) for r, ref in zip(responses, refs, strict=True)]
        return self.pool.map(score_gym_item, items)

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until the workers have imported reasoning-gym."""
        self.pool.wait_ready(timeout_s)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> GymScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""reasoning-gym's scorers as a reward: the gym route of :mod:`reasonrl.rewards.routing` (:class:`GymRowScorer`) and
the hard-timeout pool it runs in (:class:`GymScorer`). The tasks themselves, as data rows, are
:mod:`reasonrl.data.gym` (``GymSource``), which builds on this module.

    with GymScorer(num_workers=2, timeout_s=5.0) as scorer:
        scores = scorer.score(responses, rows)            # floats in [0, 1], hard-timeout workers

``reasoning_gym`` (``pip install reasoning-gym==0.1.25``, the ``gym`` extra) is imported lazily. A row carries
``{"gym": {"name", "seed", "size", "config", "index"}}``, enough to regenerate its entry deterministically in a
worker process, where ``dataset.score_answer(answer, entry)`` scores the extracted answer.

Safety: several reasoning-gym scorers pass the answer to ``eval`` or sympy's ``parse_expr`` (in 0.1.25:
countdown, puzzle24, binary_matrix, spiral_matrix, string_insertion, n_queens, simple_integration,
intermediate_integration, polynomial_multiplication). For countdown and puzzle24 the answer must first match an
arithmetic whitelist (digits, + - * / ( ) and spaces, no ``**``), otherwise it scores 0. The other listed tasks
(:data:`UNSAFE_TASKS`) are refused unless a config source allows them (``allow_unsafe_scorer=true``). All scoring
runs in ``TimeoutPool`` worker processes under the hard timeout (``GymScorer`` workers import reasoning-gym before
they take work, so the 1-2 s import never counts against an item's timeout).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from reasonrl.rewards.extract import extract_answer
from reasonrl.rewards.pool import TaskOutcome, TimeoutPool
from reasonrl.rewards.scorers import shaped_results
from reasonrl.rewards.shaping import RewardResult

if TYPE_CHECKING:
    from reasonrl.dataplane.completion import Completion

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


def reasoning_gym_module():
    """``reasoning_gym``, imported now; :class:`GymNotInstalled` with the install command when it is missing."""
    try:
        import reasoning_gym
    except ImportError as exc:
        raise GymNotInstalled(
            "reasoning-gym is not installed: `pip install reasoning-gym==0.1.25` (the 'gym' extra of reasonrl)"
        ) from exc
    return reasoning_gym


@lru_cache(maxsize=64)
def gym_dataset(name: str, size: int, seed: int, config_json: str):
    """The reasoning-gym dataset of a row's ``gym`` reference (cached: a worker scores many entries of one)."""
    return reasoning_gym_module().create_dataset(name, size=size, seed=seed, **json.loads(config_json))


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
    dataset = gym_dataset(ref["name"], int(ref["size"]), int(ref["seed"]), ref["config"])
    return float(dataset.score_answer(answer, dataset[int(ref["index"])]))  # the entry is regenerated, never given


def _init_worker() -> None:
    reasoning_gym_module()


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
        reasoning_gym_module()  # fail here, with the install hint, rather than in a worker
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


GYM_REF_KEYS = ("name", "seed", "size", "config", "index")


def is_gym_reference(ref: Any) -> bool:
    """A reference a worker can regenerate the entry from: exactly :data:`GYM_REF_KEYS` with their types (never an
    entry carried by the row: its text would reach reasoning-gym scorers that eval entry fields)."""
    if not isinstance(ref, Mapping) or set(ref) != set(GYM_REF_KEYS):
        return False
    ints = all(isinstance(ref[k], int) and not isinstance(ref[k], bool) for k in ("seed", "size", "index"))
    return ints and isinstance(ref["name"], str) and isinstance(ref["config"], str) and 0 <= ref["index"] < ref["size"]


def gym_ref(row: Mapping[str, Any]) -> dict[str, Any]:
    """The reasoning-gym reference a gym-routed row is scored with: its ``gym`` field (checked by ``row_route``)."""
    return dict(row["gym"])


class GymRowScorer:
    """reasoning-gym's ``score_answer`` on gym-routed rows (:class:`GymScorer`: hard-timeout worker processes that
    import reasoning-gym before taking work), with the shaping of ``RewardConfig``. A score ``s`` in [0, 1] (partial
    credit exists) is shaped as every rule score (:func:`shaped_results`); ``correct`` means ``s == 1``."""

    def __init__(self, cfg):
        self.reward_config = cfg.reward_config()
        self.gym = GymScorer(
            num_workers=cfg.verify_workers, timeout_s=cfg.verify_timeout_s, extract_mode=self.reward_config.extract_mode
        )

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        texts = [c.text for c in completions]
        outcomes = self.gym.score_refs(texts, [gym_ref(row) for row in rows])
        extracted = [gym_answer(t, self.reward_config.extract_mode) for t in texts]
        scores, reasons = [], []
        for outcome, answer in zip(outcomes, extracted, strict=True):
            score = float(outcome.value) if outcome.status == "ok" else 0.0
            scores.append(min(max(score, 0.0), 1.0))
            if outcome.status != "ok":
                reasons.append(outcome.status)
            else:
                reasons.append("correct" if score >= 1.0 else ("no_answer" if answer is None else "wrong"))
        elapsed = [o.elapsed_s for o in outcomes]
        return shaped_results(completions, scores, reasons, extracted, self.reward_config, elapsed)

    def wait_ready(self) -> None:
        self.gym.wait_ready()

    def close(self) -> None:
        self.gym.close()

"""Reward routing: each row's completions go to the verifier its ``data_source`` names, as verl's reward manager
does; the verifiers are :mod:`reasonrl.rewards.scorers` and :mod:`reasonrl.rewards.gym`.

* :class:`RoutingScorer` (what :func:`build_scorer` returns) sends each row to a verifier by its ``data_source``
  field:

  ==========================  =====================================================================================
  ``data_source``             verifier
  ==========================  =====================================================================================
  absent / empty              a row with a ``gym`` reference (rows of a ``gym:`` source): ``gym``; otherwise the
                              config default: ``remote`` when ``reward_url`` is set, ``user`` when ``reward_fn``
                              is set (validation refuses both), else ``math``
  ``math``                    the ORZ math rule (:class:`~reasonrl.rewards.scorers.MathScorer`)
  ``exact_match``             :class:`~reasonrl.rewards.scorers.ExactMatchScorer`
  ``gym``                     :class:`~reasonrl.rewards.gym.GymRowScorer`; the row must carry its ``gym`` reference
  ``gym:<task>``              the same, for a row whose ``gym`` reference is task ``<task>``
  ``user``                    the config's ``reward_fn`` (:class:`~reasonrl.rewards.scorers.UserFnScorer`; a row
                              can only pick it, never name code to import)
  ``code``                    :class:`~reasonrl.rewards.scorers.CodeScorer`: the program extracted from the completion
                              (:func:`reasonrl.rewards.code.extract_code`: the last closed fenced python block, else
                              the whole completion) runs against the row's ``tests`` in the sandbox
  ``remote``                  the config's ``reward_url`` service (:class:`~reasonrl.rewards.remote.RemoteScorer`,
                              the protocol of docs/model_rewards.md); a row can only pick it, never name a URL
  ==========================  =====================================================================================

  Anything else is refused by :func:`routing_problems` before training (call it on the loaded rows), and raises
  ``ValueError`` if a batch holds it anyway. A verifier is started only when some row needs it: a run whose rows
  all use the default never imports reasoning-gym nor starts gym workers, and such a batch goes to the default
  scorer unsplit.

All rule scorers share the reward shaping of ``RewardConfig`` (:func:`reasonrl.rewards.scorers.shaped_results`:
ORZ rule, reward only when ``finish_reason`` is ``stop``; optional format reward and DAPO overlong penalty). A
reasoning-gym score ``s`` in [0, 1] (partial credit exists) gives ``wrong_reward + s * (correct_reward -
wrong_reward)``, and ``correct`` means ``s == 1``. What the config's ``gym:`` sources allow arrives as a value
(:class:`GymSources`, read by :func:`reasonrl.data.gym_source.gym_sources`): rewards/ never imports data/.

This module is pure routing: no Ray, DeepSpeed or vLLM, and no loop; the trainer calls the scorer it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reasonrl.rewards.cluster_routes import CLUSTER_ROUTES, cluster_builds
from reasonrl.rewards.gym import GYM_REF_KEYS, UNSAFE_TASKS, GymRowScorer, is_gym_reference
from reasonrl.rewards.judge import judge_configured, judge_from_config
from reasonrl.rewards.remote import RemoteScorer
from reasonrl.rewards.scorers import CodeScorer, ExactMatchScorer, MathScorer, UserFnScorer
from reasonrl.rewards.shaping import RewardResult

if TYPE_CHECKING:
    from reasonrl.dataplane.completion import Completion

DATA_SOURCE_FIELD = "data_source"
ROUTES = ("math", "exact_match", "gym", "gym:<task>", "user", "code", "remote")


@dataclass(frozen=True)
class GymSources:
    """What the config's ``gym:`` sources tell routing, read above rewards/ (they are data sources:
    :func:`reasonrl.data.gym_source.gym_sources`) and passed in as a value.

    ``allowed_unsafe``: the reasoning-gym tasks with an ``eval``-based scorer that a source allows
    (``allow_unsafe_scorer=true``); a data row can never allow one itself. ``named``: the config names a ``gym:``
    source, so the gym scorer's workers start with the default route's."""

    allowed_unsafe: frozenset[str] = frozenset()
    named: bool = False


NO_GYM_SOURCES = GymSources()


def default_route(cfg) -> str:
    """The verifier of rows without ``data_source``: ``remote`` when the config sets ``reward_url``, ``user`` when
    it sets ``reward_fn``, else ``math``."""
    if getattr(cfg, "reward_url", None):
        return "remote"
    return "user" if getattr(cfg, "reward_fn", None) else "math"


def row_route(
    row: Mapping[str, Any],
    default: str,
    *,
    user_fn: bool,
    allowed_unsafe: frozenset[str] = frozenset(),
    remote: bool = False,
) -> tuple[str, str | None]:
    """``(verifier, gym task)`` of a row: verifier ``math`` / ``exact_match`` / ``gym`` / ``user`` / ``code`` /
    ``remote`` (see the module table), the task only for ``gym``. ``remote``: the config sets ``reward_url``.
    Raises ``ValueError`` saying what is wrong with the row's ``data_source``."""
    value = row.get(DATA_SOURCE_FIELD)
    ref = row.get("gym")
    task = None
    if ref is not None and not is_gym_reference(ref):
        raise ValueError(
            f"its 'gym' field {ref!r} is not a reasoning-gym reference ({', '.join(GYM_REF_KEYS)} and nothing else, "
            "as a gym: source writes it)"
        )
    if value is None or value == "":
        kind = "gym" if ref is not None else default
    elif not isinstance(value, str):
        raise ValueError(f"{DATA_SOURCE_FIELD} {value!r} is a {type(value).__name__}; allowed: {', '.join(ROUTES)}")
    elif value in ("math", "exact_match", "user", "remote"):
        kind = value
    elif value == "code":
        kind = value
        _check_code_tests(row)
    elif value == "gym" or (value.startswith("gym:") and len(value) > len("gym:")):
        if ref is None:  # scoring a row's own text would hand it to reasoning-gym scorers that eval entry fields
            raise ValueError(
                f"{DATA_SOURCE_FIELD} {value!r} needs the row's 'gym' reference, which rows of a gym: source carry "
                "(the entry is regenerated from it); a row's own question/answer/metadata are never passed to "
                "reasoning-gym, whose scorers eval entry fields for some tasks: load the task as train_data=gym:<task>"
            )
        kind, task = "gym", value[len("gym:") :] or None
        if task is not None and ref["name"] != task:
            raise ValueError(f"{DATA_SOURCE_FIELD} {value!r} but its 'gym' reference is task {ref['name']!r}")
    else:
        raise ValueError(f"unknown {DATA_SOURCE_FIELD} {value!r}; allowed: {', '.join(ROUTES)}")
    if kind == "user" and not user_fn:
        raise ValueError(f"{DATA_SOURCE_FIELD} 'user' needs a reward function: set reward_fn in the config")
    if kind == "remote" and not remote:
        raise ValueError(
            f"{DATA_SOURCE_FIELD} 'remote' needs a reward service: set reward_url in the config (docs/model_rewards.md)"
        )
    if kind == "gym":
        task = task or ref["name"]
        if task in UNSAFE_TASKS and task not in allowed_unsafe:
            raise ValueError(
                f"reasoning-gym task {task!r} scores model output with eval/parse_expr; only a config source "
                f"gym:{task}:allow_unsafe_scorer=true allows it"
            )
    return kind, task


def _check_code_tests(row: Mapping[str, Any]) -> None:
    """A code row's ``tests`` must be one of the formats of :mod:`reasonrl.rewards.code`."""
    from reasonrl.rewards.code import parse_tests

    if "tests" not in row:
        raise ValueError(f"{DATA_SOURCE_FIELD} 'code' needs a 'tests' field (stdin/stdout, call or check style)")
    try:
        parse_tests(row["tests"])
    except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"its tests are malformed: {exc}") from None


def routing_problems(
    cfg,
    rows_by_set: Mapping[str, Sequence[Mapping[str, Any]]],
    max_per_set: int = 3,
    *,
    gym: GymSources = NO_GYM_SOURCES,
) -> list[str]:
    """Problems of the loaded rows' ``data_source`` fields, one message per bad row (at most ``max_per_set`` per
    set, then a count), each naming the set, row index and id: an unknown value, ``user`` without ``reward_fn``,
    ``remote`` without ``reward_url``,
    an ``eval``-based gym task the config does not allow, or a gym task reasoning-gym does not have. Cheap for
    rows without ``data_source`` or ``gym`` (reasoning-gym is imported only when some row names a task).

    Call it before training on the training rows and every eval set, with the config's gym sources, e.g.
    ``routing_problems(cfg, {"train_data": train_rows, **{f"eval_data {k}": v for k, v in eval_sets.items()}},
    gym=reasonrl.data.gym_source.gym_sources(cfg))``.
    """
    default, user_fn, allowed = default_route(cfg), bool(getattr(cfg, "reward_fn", None)), gym.allowed_unsafe
    remote = bool(getattr(cfg, "reward_url", None))
    problems: list[str] = []
    tasks: dict[str, str] = {}  # gym task -> the first row naming it
    cluster_rows = 0  # rows scored on reward actors when reward_num_cpus > 0
    for set_name, rows in rows_by_set.items():
        bad = []
        for i, row in enumerate(rows):
            where = f"{set_name} row {i} (id {row.get('id')!r})"
            try:
                kind, task = row_route(row, default, user_fn=user_fn, allowed_unsafe=allowed, remote=remote)
                cluster_rows += kind in CLUSTER_ROUTES
            except ValueError as exc:
                bad.append(f"{where}: {exc}")
                continue
            if task is not None:
                tasks.setdefault(task, where)
        problems += bad[:max_per_set]
        if len(bad) > max_per_set:
            problems.append(f"{set_name}: {len(bad) - max_per_set} more row(s) with a bad {DATA_SOURCE_FIELD}")
    if tasks:
        problems += _unknown_gym_tasks(tasks)
    num_cpus = getattr(cfg, "reward_num_cpus", 0) or 0
    if num_cpus > 0 and rows_by_set and not cluster_rows:
        problems.append(
            f"reward_num_cpus={num_cpus} starts reward actors for the {' and '.join(CLUSTER_ROUTES)} routes, but no "
            f"row of {', '.join(rows_by_set)} is scored by them (default route {default!r}): set reward_num_cpus=0"
        )
    return problems


def _unknown_gym_tasks(tasks: Mapping[str, str]) -> list[str]:
    try:
        from reasoning_gym.factory import DATASETS
    except ImportError:
        first = next(iter(tasks.values()))
        return [f"{first}: routed to reasoning-gym, which is not installed: pip install -e .[gym]"]
    return [
        f"{where}: reasoning-gym has no task {task!r} (python -m reasonrl.data.gym_source lists them)"
        for task, where in tasks.items()
        if task not in DATASETS
    ]


def check_routes(
    cfg, rows_by_set: Mapping[str, Sequence[Mapping[str, Any]]], *, gym: GymSources = NO_GYM_SOURCES
) -> None:
    """Raise ``ValueError`` listing :func:`routing_problems`, if any."""
    problems = routing_problems(cfg, rows_by_set, gym=gym)
    if problems:
        raise ValueError("rows the scorer cannot route:\n  " + "\n  ".join(problems))


def _build_route(kind: str, cfg):
    if kind == "math":
        return MathScorer(cfg)
    if kind == "exact_match":
        return ExactMatchScorer(cfg.reward_config())
    if kind == "gym":
        return GymRowScorer(cfg)
    if kind == "user":
        return UserFnScorer(cfg.reward_fn)
    if kind == "code":
        return CodeScorer(cfg)
    if kind == "remote":
        return RemoteScorer.from_config(cfg)
    raise ValueError(f"unknown route {kind!r}")


class RoutingScorer:
    """Scores each sample with the verifier of its row's ``data_source`` (module table), keeping sample order.

    The default route's scorer is built at once (its workers start, and a bad ``reward_fn`` fails, here), the
    gym scorer too when the config names a ``gym:`` source (``gym.named``); any other route's scorer on the first row
    that needs it. A batch whose rows all take one route goes to that scorer whole. With ``reward_num_cpus > 0`` the
    ``math`` and ``code`` routes are never built here: the run attaches their reward actors once Ray runs
    (:meth:`attach_cluster`, :mod:`reasonrl.rewards.cluster_routes`), and scoring them before that raises.
    ``gym``: what the config's ``gym:`` sources allow (:class:`GymSources`).
    """

    def __init__(self, cfg, gym: GymSources = NO_GYM_SOURCES):
        self.cfg = cfg
        self.default = default_route(cfg)
        self.user_fn = bool(getattr(cfg, "reward_fn", None))
        self.remote = bool(getattr(cfg, "reward_url", None))
        self.allowed_unsafe = gym.allowed_unsafe
        self.scorers: dict[str, Any] = {}
        # reward_num_cpus > 0: these routes run on reward actors, attached once Ray runs (attach_cluster)
        self.num_cpus = getattr(cfg, "reward_num_cpus", 0) or 0
        self.cluster_routes = CLUSTER_ROUTES if self.num_cpus > 0 else ()
        self._lock = threading.Lock()
        try:
            if self.default not in self.cluster_routes:
                self.scorer(self.default)
            if gym.named:
                self.scorer("gym")
        except BaseException:
            self.close()
            raise

    def scorer(self, kind: str):
        """The scorer of route ``kind``, built on first use; a cluster route's only once it is attached."""
        with self._lock:
            if kind not in self.scorers:
                if kind in self.cluster_routes:
                    raise RuntimeError(
                        f"the {kind} route runs on reward actors (reward_num_cpus={self.num_cpus}), which start "
                        "once Ray runs, and none are attached (RoutingScorer.attach_cluster)"
                    )
                self.scorers[kind] = _build_route(kind, self.cfg)
            return self.scorers[kind]

    def cluster_builds(self) -> dict:
        """``{route: RouteBuild}`` of the routes that run on reward actors (``reward_num_cpus > 0``; else empty):
        what each actor builds where it runs (:mod:`reasonrl.rewards.cluster_routes`)."""
        return cluster_builds(self.cfg) if self.cluster_routes else {}

    def attach_cluster(self, scorers: Mapping[str, Any]) -> None:
        """Score the cluster routes with ``scorers`` (route -> a scorer on the reward actors) from now on."""
        unknown = set(scorers) - set(self.cluster_routes)
        if unknown:
            raise ValueError(f"routes {sorted(unknown)} do not run on reward actors here ({self.cluster_routes})")
        with self._lock:
            self.scorers.update(scorers)

    def detach_cluster(self) -> None:
        """Forget the cluster routes' scorers (their actors are going away: the attempt ends); not closed here,
        their owner closes the actors."""
        with self._lock:
            for kind in self.cluster_routes:
                self.scorers.pop(kind, None)

    def routes(self, rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """The route of each row; ``ValueError`` naming the first row that has none."""
        out = []
        for i, row in enumerate(rows):
            try:
                kind, _ = row_route(
                    row, self.default, user_fn=self.user_fn, allowed_unsafe=self.allowed_unsafe, remote=self.remote
                )
                out.append(kind)
            except ValueError as exc:
                raise ValueError(f"row {i} (id {row.get('id')!r}): {exc}") from None
        return out

    def __call__(self, completions: Sequence[Completion], rows: Sequence[dict]) -> list[RewardResult]:
        if len(completions) != len(rows):
            raise ValueError(f"{len(completions)} completions but {len(rows)} rows")
        kinds = self.routes(rows)
        if len(set(kinds)) <= 1:
            return self.scorer(kinds[0] if kinds else self.default)(completions, rows)
        results: list[RewardResult | None] = [None] * len(rows)
        for kind in dict.fromkeys(kinds):
            idx = [i for i, k in enumerate(kinds) if k == kind]
            part = self.scorer(kind)([completions[i] for i in idx], [rows[i] for i in idx])
            for i, result in zip(idx, part, strict=True):
                results[i] = result
        return results  # type: ignore[return-value]

    def wait_ready(self) -> None:
        """Block until the workers of every scorer built so far are up."""
        for scorer in list(self.scorers.values()):
            wait_ready = getattr(scorer, "wait_ready", None)
            if callable(wait_ready):
                wait_ready()

    def close(self) -> None:
        for scorer in list(self.scorers.values()):
            scorer.close()


def build_scorer(cfg, gym: GymSources = NO_GYM_SOURCES):
    """The trainer's scorer: a :class:`RoutingScorer` whose default is the ``cfg.reward_url`` service if set, else
    ``cfg.reward_fn`` if set, else the ORZ math reward (rows route elsewhere only through ``data_source`` or a ``gym``
    reference). ``gym``: the config's ``gym:`` sources as :func:`reasonrl.data.gym_source.gym_sources` reads them.
    With a judge (``judge_pretrain`` / ``judge_url``) the routing scorer is wrapped in a
    :class:`reasonrl.rewards.judge.JudgeScorer` that mixes the judge's verdicts in by ``judge_weight``."""
    scorer = RoutingScorer(cfg, gym)
    if not judge_configured(cfg):
        return scorer
    try:
        return judge_from_config(cfg, scorer)
    except BaseException:
        scorer.close()
        raise

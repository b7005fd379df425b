"""What reward actors on the cluster need to build the math and code scorers: plain, picklable values.

With ``reward_num_cpus > 0`` the routes in :data:`CLUSTER_ROUTES` run in single-CPU Ray actors anywhere in the
cluster (``reasonrl.distributed.reward_actors``) instead of process pools on the driver. Each actor builds the same
scorer the driver would (:class:`~reasonrl.rewards.scorers.MathScorer`, :class:`~reasonrl.rewards.scorers.CodeScorer`)
with one worker, from :class:`RouteSettings`: the config's reward fields copied into rewards' own dataclasses on the
driver. So the actor needs neither the config class (which may live in a user's script) nor ``reasonrl.config``,
and the deadlines and verdicts are those of the driver's scorers, field for field.

The other routes stay on the driver: ``exact_match`` (string work, linear in the response), ``user`` (a reward
function the driver imported and checked), ``gym`` (reasoning-gym's scorers, a route of its own) and ``remote``
(already a service of its own).

This module imports no Ray (``tests/test_layout.py``): ``reasonrl.run.launch`` hands :class:`RouteBuild` values to
the actors, which call them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reasonrl.rewards.code import CodeRewardConfig
from reasonrl.rewards.shaping import RewardConfig

CLUSTER_ROUTES = ("math", "code")


@dataclass(frozen=True)
class RouteSettings:
    """The reward fields of a config that :class:`MathScorer` and :class:`CodeScorer` read, as plain values.

    It answers the same attribute and method names as the config (``verify_workers``, ``verify_timeout_s``,
    ``extract_mode``, ``verify_batch_timeout_s``, ``reward_config()``, ``code_reward_config()``), so the scorers
    are built from it exactly as from the config. ``verify_workers`` and ``code.workers`` are 1: one actor holds one
    Ray CPU and runs one verification or one program at a time.
    """

    reward: RewardConfig
    code: CodeRewardConfig
    extract_mode: str
    verify_timeout_s: float
    verify_batch_timeout_s: float | None
    verify_workers: int = 1

    @classmethod
    def from_config(cls, cfg) -> RouteSettings:
        """The settings of ``cfg`` (a ``BasePPOExpConfig``) with one worker per actor."""
        return cls(
            reward=cfg.reward_config(),
            code=replace(cfg.code_reward_config(), workers=1),
            extract_mode=cfg.extract_mode,
            verify_timeout_s=cfg.verify_timeout_s,
            verify_batch_timeout_s=cfg.verify_batch_timeout_s,
        )

    def reward_config(self) -> RewardConfig:
        return self.reward

    def code_reward_config(self) -> CodeRewardConfig:
        return self.code


@dataclass(frozen=True)
class RouteBuild:
    """A zero-argument builder of route ``kind``'s scorer (``math`` or ``code``) from ``settings``; picklable by
    reference, so a Ray actor calls it where it runs. The scorer's own checks run there too (``code_isolate='ns'``
    is refused on a node whose kernel refuses user namespaces, naming the field)."""

    kind: str
    settings: RouteSettings

    def __post_init__(self):
        if self.kind not in CLUSTER_ROUTES:
            raise ValueError(f"route {self.kind!r} does not run on reward actors; those that do: {CLUSTER_ROUTES}")

    def __call__(self):
        from reasonrl.rewards.scorers import CodeScorer, MathScorer

        return MathScorer(self.settings) if self.kind == "math" else CodeScorer(self.settings)


def cluster_builds(cfg) -> dict[str, RouteBuild]:
    """``{route: RouteBuild}`` of every route in :data:`CLUSTER_ROUTES`, from ``cfg``."""
    settings = RouteSettings.from_config(cfg)
    return {kind: RouteBuild(kind, settings) for kind in CLUSTER_ROUTES}


def cluster_target(scorer):
    """The object whose cluster routes reward actors serve: ``scorer`` itself when it has ``attach_cluster`` (a
    ``RoutingScorer``), else the routing scorer a wrapper holds as ``inner`` (the judge's ``JudgeScorer``), else
    None (a scorer of the experiment's own, which ``reward_num_cpus`` cannot reach)."""
    for candidate in (scorer, getattr(scorer, "inner", None)):
        if callable(getattr(candidate, "attach_cluster", None)):
            return candidate
    return None

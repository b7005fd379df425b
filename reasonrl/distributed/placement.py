"""Ray placement groups for the RL roles: created from the requests of :mod:`reasonrl.planning.placement_layout`
(roles, bundles, colocation modes and their rules are described there), checked against the cluster before
anything waits; each role's :class:`RolePlacement` (its bundles and actor options) once they exist.

Node layout. Groups use the ``PACK`` strategy: Ray fills as few nodes as possible, so a node with ``D`` free
devices hosts ``D`` bundles of a group, and a request of ``N x D`` lands on ``N`` nodes on a cluster of ``D``-device
nodes. ``STRICT_PACK`` would forbid a group from spanning nodes and ``STRICT_SPREAD`` would put at most one bundle
per node, so neither fits ``N x D``. DeepSpeed ranks work wherever their bundles land; the one hard locality need
is a vLLM engine's ``tp`` bundles (one engine runs on one node), which the feasibility check accounts for. Groups
with such blocks are created first; once the groups are ready, a block Ray split over nodes is replaced by a
node-aligned one (``bundles_to_node_id``, :func:`node_aligned_blocks`), with a clear error when none exists.
The engine actor of a ``tp > 1`` block holds no GPU; vLLM's Ray executor starts its workers on the block
(:meth:`RolePlacement.env_vars`). Each actor's device environment comes from its bundles, never the driver.

Never hang. :func:`build_placement` first compares the whole request with the alive nodes' resources
(:func:`check_feasible`, pure) and raises :class:`PlacementError` naming the roles, what they asked for, what the
cluster has and what to change. Only then are groups created, and waiting on them is bounded: on timeout (the
resources exist but are held, e.g. by other jobs) the groups are removed and :class:`PlacementError` names the
roles still waiting.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loguru import logger

from reasonrl.planning.feasibility import fmt_devices
from reasonrl.planning.placement_layout import (
    GroupRequest,
    PlacementError,
    RoleResources,
    VLLMResources,
    check_feasible,
    node_aligned_blocks,
    plan_groups,
)


@dataclasses.dataclass
class RolePlacement:
    """Where one role's actors go. ``bundle_indices[i]`` is the bundle of actor ``i`` (rank or engine).

    ``engine_bundle_indices[i]`` lists all bundles of actor ``i``: ``[b]`` for a DeepSpeed rank, the ``tp`` bundles
    of a vLLM engine (first one = ``bundle_indices[i]``). An engine with ``tp > 1`` on GPUs needs its tensor-parallel
    workers on the other bundles of its block (e.g. vLLM's Ray executor pointed at those bundles); one 1-GPU bundle
    cannot give a single actor ``tp`` GPUs. ``num_gpus_per_actor`` / ``num_cpus_per_actor`` are the share of one
    bundle each actor may ask for: ``1/k`` of it when ``k`` roles share the bundles. ``device`` (``"gpu"`` /
    ``"cpu"``: the kind of the bundles) sets each actor's environment (:meth:`env_vars`).

    vLLM engines with ``tp > 1`` (vLLM 0.32's Ray executor, ``RayExecutorV2``): the engine actor holds no GPU
    (``num_gpus=0``, its CPU share only) and captures child tasks into the group; vLLM starts one worker actor per
    tensor-parallel rank on exactly the bundles named in ``VLLM_RAY_BUNDLE_INDICES`` (the engine's block), each
    asking ``VLLM_RAY_PER_WORKER_GPUS`` = this role's GPU share of a bundle (1, or ``1/k`` when colocated).
    Without those variables vLLM takes the group's first ``tp`` GPU bundles for every engine.
    """

    role: str
    placement_group: Any
    bundle_indices: list[int]
    engine_bundle_indices: list[list[int]]
    num_gpus_per_actor: float
    num_cpus_per_actor: float
    colocated_with: tuple[str, ...]
    group_name: str
    device: str = "gpu"
    cpus_per_bundle: float = 1.0

    @property
    def num_actors(self) -> int:
        return len(self.bundle_indices)

    @property
    def tensor_parallel_size(self) -> int:
        """Bundles per actor: a vLLM engine's ``tp`` (1 for DeepSpeed ranks)."""
        return len(self.engine_bundle_indices[0]) if self.engine_bundle_indices else 1

    @property
    def spawns_tp_workers(self) -> bool:
        """Whether each actor is a vLLM engine whose tensor-parallel workers are separate Ray actors (GPU, tp > 1;
        on CPU vLLM runs them as processes of the engine actor)."""
        return self.role == "vllm" and self.tensor_parallel_size > 1 and self.device == "gpu"

    def scheduling_strategy(self, i: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=self.placement_group,
            placement_group_bundle_index=self.bundle_indices[i],
            placement_group_capture_child_tasks=self.spawns_tp_workers,
        )

    def env_vars(self, i: int) -> dict[str, str]:
        """Environment of actor ``i``: its placement's device environment (``platform.runtime_env_vars``, with
        ``REASONRL_DEVICE``), the CPU threads of its bundle (``platform.cpu_threads_env``: the roles sharing a
        bundle take turns, so each may use all its CPUs), plus, for a vLLM engine with ``tp > 1``, the bundles and
        GPU share of its workers."""
        from reasonrl.distributed.platform import cpu_threads_env, runtime_env_vars

        env = runtime_env_vars(on_gpu=self.device == "gpu")
        env.update(cpu_threads_env(self.cpus_per_bundle))
        if self.spawns_tp_workers:
            env["VLLM_RAY_BUNDLE_INDICES"] = ",".join(str(b) for b in self.engine_bundle_indices[i])
            env["VLLM_RAY_PER_WORKER_GPUS"] = f"{self.num_gpus_per_actor:g}"
        return env

    def actor_resources(self, i: int) -> dict[str, float]:
        """``num_cpus`` / ``num_gpus`` of actor ``i`` in its bundle. A vLLM engine with ``tp > 1`` asks no GPU
        itself: its workers do, one per bundle of its block (:meth:`env_vars`)."""
        return dict(num_cpus=self.num_cpus_per_actor, num_gpus=0 if self.spawns_tp_workers else self.num_gpus_per_actor)

    def actor_options(self, i: int) -> dict[str, Any]:
        """``ray.remote(...).options(**role.actor_options(i))`` for actor ``i``: resources, bundle, environment."""
        return dict(
            **self.actor_resources(i),
            scheduling_strategy=self.scheduling_strategy(i),
            runtime_env={"env_vars": self.env_vars(i)},
        )


def role_placements(groups: Iterable[tuple[GroupRequest, Any]], device: str) -> dict[str, RolePlacement]:
    """Every role's :class:`RolePlacement` in ``(request, placement group)`` pairs (pure: the group may be None)."""
    roles = {}
    for req, pg in groups:
        for role, blocks in req.actors.items():
            roles[role] = RolePlacement(
                role=role,
                placement_group=pg,
                bundle_indices=[b[0] for b in blocks],
                engine_bundle_indices=[list(b) for b in blocks],
                num_gpus_per_actor=req.num_gpus_per_actor,
                num_cpus_per_actor=req.num_cpus_per_actor,
                colocated_with=tuple(r for r in req.roles if r != role),
                group_name=req.name,
                device=device,
                cpus_per_bundle=float(req.bundle.get("CPU", 1.0)),
            )
    return roles


@dataclasses.dataclass
class PlacementPlan:
    """The created, ready placement groups and every enabled role's placement. Call :meth:`remove` when done."""

    device: str
    roles: dict[str, RolePlacement]
    groups: list[tuple[GroupRequest, Any]]
    bundle_nodes: dict[str, dict[int, str]] = dataclasses.field(default_factory=dict)

    def __getitem__(self, role: str) -> RolePlacement:
        return self.roles[role]

    def __contains__(self, role: str) -> bool:
        return role in self.roles

    def remove(self) -> None:
        """Remove every placement group of this plan (idempotent)."""
        remove_placement(self)

    def __enter__(self) -> PlacementPlan:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


# ---------------------------------------------------------------------------------------------------- Ray
def build_placement(
    roles: Mapping[str, RoleResources | VLLMResources | None],
    *,
    colocate_all: bool = False,
    colocate_policy_ref: bool = False,
    colocate_critic_reward: bool = False,
    device: str = "auto",
    cpus_per_bundle: float = 1,
    ready_timeout_s: float = 60,
) -> PlacementPlan:
    """Create (and wait, bounded, for) the placement groups of all enabled roles on the running Ray cluster.

    ``device="auto"`` picks ``"gpu"`` when the cluster reports GPUs, else ``"cpu"``. Raises
    :class:`PlacementError` without creating anything when the request is invalid or larger than the cluster,
    and after removing what it created when the groups are not ready within ``ready_timeout_s``.
    """
    import ray

    cluster = ray.cluster_resources()
    if device == "auto":
        device = "gpu" if cluster.get("GPU", 0) > 0 else "cpu"
    requests = plan_groups(
        roles,
        colocate_all=colocate_all,
        colocate_policy_ref=colocate_policy_ref,
        colocate_critic_reward=colocate_critic_reward,
        device=device,
        cpus_per_bundle=cpus_per_bundle,
    )
    check_feasible(requests, cluster, ray.nodes())
    _warn_if_busy(requests, ray.available_resources())

    from ray.util.placement_group import placement_group

    created: list[tuple[GroupRequest, Any]] = []
    plan = PlacementPlan(device=device, roles={}, groups=created)
    try:
        suffix = uuid.uuid4().hex[:6]
        # Groups with tensor-parallel blocks first, and ready before the others start: Ray places groups in
        # creation order, and single bundles placed first would fragment the nodes the blocks need (as the
        # feasibility check assumes: largest blocks first).
        first = [req for req in requests if req.node_local_blocks]
        for batch in (first, [req for req in requests if not req.node_local_blocks]):
            if not batch:
                continue
            for req in batch:
                bundles = [dict(req.bundle) for _ in range(req.num_bundles)]
                pg = placement_group(bundles, strategy=req.strategy, name=f"reasonrl-{req.name}-{suffix}")
                created.append((req, pg))
            _wait_ready(created, ready_timeout_s)
        _check_node_locality(plan)
    except BaseException:
        remove_placement(plan)
        raise
    plan.roles.update(role_placements(created, device))
    logger.info(
        f"placement ready ({device}): "
        + "; ".join(f"{req.describe()}, per actor {req.num_gpus_per_actor:g} GPU" for req, _ in created)
    )
    return plan


def _warn_if_busy(requests: Sequence[GroupRequest], available: Mapping[str, float]) -> None:
    need: dict[str, float] = {}
    for req in requests:
        for res, amount in req.bundle.items():
            need[res] = need.get(res, 0.0) + amount * req.num_bundles
    short = {res: (amount, available.get(res, 0.0)) for res, amount in need.items() if amount > available.get(res, 0)}
    if short:
        logger.warning(
            "the cluster is big enough but some resources are in use right now "
            + ", ".join(f"{res}: need {a:g}, free {f:g}" for res, (a, f) in short.items())
            + "; waiting for them (bounded)"
        )


def _wait_ready(created: list[tuple[GroupRequest, Any]], timeout_s: float) -> None:
    import ray

    refs = {pg.ready(): req for req, pg in created}
    start = time.monotonic()
    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    ray.get(ready)  # surface errors of the ready ones
    if pending:
        waiting = [refs[r] for r in pending]
        available = ray.available_resources()
        raise PlacementError(
            f"placement groups for {', '.join(req.label for req in waiting)} were not ready after "
            f"{time.monotonic() - start:.0f}s (ready_timeout_s={timeout_s:g}); the cluster is big enough, so its "
            f"resources are probably held by other jobs, actors or placement groups:\n"
            + "".join(f"  waiting: {req.describe()}\n" for req in waiting)
            + f"  free now: {fmt_devices(available)}\n"
            f"  to fix: free those resources (`ray status`, `ray list placement-groups`), raise ready_timeout_s, "
            f"or make the request smaller. The groups created by this call were removed."
        )


def _check_node_locality(plan: PlacementPlan) -> None:
    """Record where Ray put each bundle and give every vLLM engine ``tp`` bundles of one node.

    ``PACK`` does not keep a block of consecutive bundles on one node (a group may start on a node another group
    half fills), so engines whose block straddles nodes are given node-aligned blocks instead
    (:func:`node_aligned_blocks`); :class:`PlacementError` when the nodes cannot hold whole blocks."""
    from ray.util.placement_group import placement_group_table

    for k, (req, pg) in enumerate(plan.groups):
        where = {int(b): n for b, n in placement_group_table(pg).get("bundles_to_node_id", {}).items()}
        plan.bundle_nodes[req.name] = where
        if req.node_local_blocks and any(len({where.get(b) for b in block}) > 1 for block in req.node_local_blocks):
            blocks = node_aligned_blocks(req.actors["vllm"], where, req.label)
            logger.info(f"{req.label}: vLLM engine bundles re-aligned to nodes: {[list(b) for b in blocks]}")
            actors = dict(req.actors) | {"vllm": blocks}
            plan.groups[k] = (dataclasses.replace(req, actors=actors, node_local_blocks=blocks), pg)


def remove_placement(plan: PlacementPlan | Iterable[Any]) -> None:
    """Remove all placement groups of ``plan`` (a :class:`PlacementPlan` or placement groups). Idempotent."""
    from ray.util.placement_group import placement_group_table, remove_placement_group

    groups = [pg for _, pg in plan.groups] if isinstance(plan, PlacementPlan) else list(plan)
    for pg in groups:
        try:
            if placement_group_table(pg).get("state") != "REMOVED":
                remove_placement_group(pg)
        except Exception as exc:  # a dead cluster or an already removed group: nothing left to free
            logger.debug(f"removing placement group {pg.id}: {exc}")

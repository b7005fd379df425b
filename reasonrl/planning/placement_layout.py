"""What goes where: role sizes -> placement group requests, checked against a cluster's nodes (pure, no Ray).

:func:`plan_groups` validates the sizes and colocation flags and describes the groups to create, :func:`check_feasible`
compares them with a cluster's nodes and :func:`node_aligned_blocks` regroups a vLLM engine's bundles onto one node.
Creating, waiting for and removing the groups on Ray, and each role's ``RolePlacement`` once they exist, is
:mod:`reasonrl.distributed.placement`.

Roles
-----
``policy``, ``ref``, ``teacher``, ``critic``, ``reward`` are DeepSpeed groups sized ``num_nodes x devices_per_node``
(:class:`RoleResources`; ``num_nodes=0`` disables a role, e.g. no critic under GRPO). ``vllm`` is
``num_engines`` engines of ``tensor_parallel_size`` devices each (:class:`VLLMResources`). The distillation
``teacher`` is placed as the reference is: the config gives it the reference's size, and it goes wherever the
reference goes (its own group, the ``policy+ref`` group under ``colocate_policy_ref``, the one group under
``colocate_all``).

Bundles
-------
One bundle per device: ``{"GPU": 1, "CPU": c}`` on GPU clusters, ``{"CPU": c}`` on CPU machines (a CPU "device" is
``c`` logical CPUs; on a small box Ray's logical CPUs are oversubscribed, see ``ray_cluster.py``). Rank ``i`` of a
role uses bundle ``i``, so ranks ``k*D .. k*D+D-1`` form "node" ``k``. vLLM engine ``i`` uses the block of ``tp``
consecutive bundles ``i*tp .. i*tp+tp-1`` and its actor sits on the first bundle of that block.

Modes (colocated roles share one placement group and the same bundles)
---------------------------------------------------------------------
::

    mode                          placement groups (each PACK)                     actors per bundle
    ----------------------------  -----------------------------------------------  -----------------
    colocate_all                  [policy+ref+critic+reward+vllm]                  up to 5
    colocate_policy_ref           [policy+ref] [critic] [reward] [vllm]            2, 1, 1, 1
      + colocate_critic_reward    [policy+ref] [critic+reward] [vllm]              2, 2, 1
    colocate_critic_reward        [policy] [ref] [critic+reward] [vllm]            1, 1, 2, 1
    separate (no flag)            [policy] [ref] [critic] [reward] [vllm]          1 each
    (a teacher joins the reference's group under the flags, [policy+ref+teacher], and is its own group [teacher]
    without them; one more actor per bundle where it joins)

    example: colocate_all, policy 2 nodes x 4 GPU, vllm 4 engines x tp 2 (one group of 8 bundles)

    bundle      0    1    2    3  |  4    5    6    7
    "node"      0    0    0    0  |  1    1    1    1
    policy      r0   r1   r2   r3 |  r4   r5   r6   r7      each actor asks 1/k GPU of its bundle
    ref         r0   r1   r2   r3 |  r4   r5   r6   r7      (k = roles sharing the group, here 5:
    critic      r0   r1   r2   r3 |  r4   r5   r6   r7       0.2 GPU, as in ORZ / OpenRLHF)
    reward      r0   r1   r2   r3 |  r4   r5   r6   r7
    vllm        e0   e0   e1   e1 |  e2   e2   e3   e3

Colocated roles must have the same ``num_nodes`` and ``devices_per_node``; under ``colocate_all`` the engines must
cover the policy's devices exactly (``num_engines * tp == policy world size``) and ``tp`` must divide
``devices_per_node`` so that no engine straddles two nodes. ``colocate_all`` implies the two pair flags.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from reasonrl.planning.feasibility import EPS, fmt_res, infeasible_message, node_capacities, packing_problems

ROLES = ("policy", "ref", "teacher", "critic", "reward", "vllm")
TRAIN_ROLES = ("policy", "ref", "teacher", "critic", "reward")


class PlacementError(ValueError):
    """A placement request that is invalid, that the cluster cannot satisfy, or whose groups did not get ready."""


@dataclasses.dataclass(frozen=True)
class RoleResources:
    """Size of one DeepSpeed role: ``num_nodes x devices_per_node`` ranks (``num_nodes=0``: role disabled)."""

    num_nodes: int
    devices_per_node: int = 1

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.devices_per_node

    @property
    def enabled(self) -> bool:
        return self.num_nodes > 0


@dataclasses.dataclass(frozen=True)
class VLLMResources:
    """vLLM engines: ``num_engines`` replicas of ``tensor_parallel_size`` devices each (``num_engines=0``: none)."""

    num_engines: int
    tensor_parallel_size: int = 1

    @property
    def world_size(self) -> int:
        return self.num_engines * self.tensor_parallel_size

    @property
    def enabled(self) -> bool:
        return self.num_engines > 0


@dataclasses.dataclass(frozen=True)
class GroupRequest:
    """One placement group to create (pure description: no Ray object).

    ``actors[role][i]`` lists the bundle indices actor ``i`` of ``role`` uses: one bundle for a DeepSpeed rank,
    ``tp`` bundles for a vLLM engine (its actor is scheduled on the first). ``node_local_blocks`` are sets of
    bundles that must land on one node (vLLM engines with ``tp > 1``).
    """

    name: str
    roles: tuple[str, ...]
    num_bundles: int
    bundle: Mapping[str, float]
    shape: str
    actors: Mapping[str, tuple[tuple[int, ...], ...]]
    num_gpus_per_actor: float
    num_cpus_per_actor: float
    node_local_blocks: tuple[tuple[int, ...], ...] = ()
    strategy: str = "PACK"
    note: str = ""

    @property
    def label(self) -> str:
        return self.name + (" (colocated)" if len(self.roles) > 1 else "")

    def describe(self) -> str:
        """``"policy+ref (colocated): 2 nodes x 8 GPU = 16 GPU bundles of {GPU: 1, CPU: 1}"``."""
        kind = "GPU" if self.bundle.get("GPU", 0) > 0 else "CPU"
        return f"{self.label}: {self.shape} = {self.num_bundles} {kind} bundles of {fmt_res(self.bundle)}{self.note}"


# ---------------------------------------------------------------------------------------------------- planning
def plan_groups(
    roles: Mapping[str, RoleResources | VLLMResources | None],
    *,
    colocate_all: bool = False,
    colocate_policy_ref: bool = False,
    colocate_critic_reward: bool = False,
    device: str = "gpu",
    cpus_per_bundle: float = 1,
) -> list[GroupRequest]:
    """Validate the role sizes and colocation flags and describe the placement groups to create (no Ray)."""
    if device not in ("gpu", "cpu"):
        raise PlacementError(f"device must be 'gpu' or 'cpu', got {device!r}")
    if not cpus_per_bundle > 0:
        raise PlacementError(f"cpus_per_bundle must be > 0, got {cpus_per_bundle}")
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise PlacementError(f"unknown role(s) {unknown}; roles are {list(ROLES)}")
    sizes: dict[str, RoleResources | VLLMResources] = {}
    for role, res in roles.items():
        if res is None:
            continue
        expected = VLLMResources if role == "vllm" else RoleResources
        if not isinstance(res, expected):
            raise PlacementError(f"{role}: expected {expected.__name__}, got {res!r}")
        _validate_size(role, res)
        if res.enabled:
            sizes[role] = res
    if "policy" not in sizes:
        raise PlacementError("policy must have at least 1 node and 1 device (policy num_nodes > 0)")

    if colocate_all:
        sets = [[r for r in ROLES if r in sizes]]
    else:
        sets = []
        pairs = ((("policy", "ref", "teacher"), colocate_policy_ref), (("critic", "reward"), colocate_critic_reward))
        for pair, flag in pairs:
            present = [r for r in pair if r in sizes]
            sets.extend([present] if flag and present else [[r] for r in present])
        if "vllm" in sizes:
            sets.append(["vllm"])

    bundle = {"GPU": 1.0, "CPU": float(cpus_per_bundle)} if device == "gpu" else {"CPU": float(cpus_per_bundle)}
    return [_group_request(members, sizes, bundle, colocate_all) for members in sets]


def _validate_size(role: str, res: RoleResources | VLLMResources) -> None:
    fields = dataclasses.asdict(res)
    for field, value in fields.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlacementError(f"{role}.{field} must be a non-negative int, got {value!r}")
    second = "tensor_parallel_size" if isinstance(res, VLLMResources) else "devices_per_node"
    if res.enabled and fields[second] < 1:
        raise PlacementError(f"{role}.{second} must be >= 1 when the role is enabled, got {fields[second]}")


def _group_request(
    members: list[str], sizes: Mapping[str, Any], bundle: dict[str, float], colocate_all: bool
) -> GroupRequest:
    kind = "GPU" if "GPU" in bundle else "CPU devices"
    train = [r for r in members if r in TRAIN_ROLES]
    actors: dict[str, tuple[tuple[int, ...], ...]] = {}
    num_bundles, shape = 0, ""
    if train:
        first = sizes[train[0]]
        for other in train[1:]:
            if sizes[other] != first:
                flag = (
                    "colocate_all"
                    if colocate_all
                    else f"colocate_{'policy_ref' if other in ('ref', 'teacher') else 'critic_reward'}"
                )
                raise PlacementError(
                    f"{flag}: {train[0]} ({_shape(first, kind)}) and {other} ({_shape(sizes[other], kind)}) share "
                    f"bundles, so they need the same num_nodes and devices_per_node; make them equal or turn {flag} off"
                )
        num_bundles, shape = first.world_size, _shape(first, kind)
        actors |= {r: tuple((i,) for i in range(num_bundles)) for r in train}
    blocks: tuple[tuple[int, ...], ...] = ()
    note = ""
    if "vllm" in members:
        v: VLLMResources = sizes["vllm"]
        tp = v.tensor_parallel_size
        engines = f"{v.num_engines} engine{'s' if v.num_engines != 1 else ''} x tp {tp}"
        if train:  # colocate_all: the engines cover the policy's bundles exactly
            if first.devices_per_node % tp:
                raise PlacementError(
                    f"colocate_all: vllm tensor_parallel_size {tp} must divide the policy's devices_per_node "
                    f"{first.devices_per_node} so that no engine straddles two nodes"
                )
            if v.world_size != num_bundles:
                raise PlacementError(
                    f"colocate_all: vllm ({engines} = {v.world_size} devices) must cover the policy's {shape} = "
                    f"{num_bundles} devices exactly (num_engines * tensor_parallel_size == policy world size): "
                    f"set vllm num_engines = {num_bundles // tp} for tp {tp}, or turn colocate_all off"
                )
            note = f"; vllm: {engines} on the same bundles"
        else:
            num_bundles, shape = v.world_size, engines
        actors["vllm"] = tuple(tuple(range(i * tp, (i + 1) * tp)) for i in range(v.num_engines))
        blocks = tuple(b for b in actors["vllm"] if len(b) > 1)
    k = len(members)
    return GroupRequest(
        name="+".join(members),
        roles=tuple(members),
        num_bundles=num_bundles,
        bundle=dict(bundle),
        shape=shape,
        actors=actors,
        num_gpus_per_actor=_share(bundle.get("GPU", 0.0), k),
        num_cpus_per_actor=_share(bundle["CPU"], k),
        node_local_blocks=blocks,
        note=note,
    )


def _shape(res: RoleResources, kind: str) -> str:
    return f"{res.num_nodes} node{'s' if res.num_nodes != 1 else ''} x {res.devices_per_node} {kind}"


def _share(amount: float, k: int) -> float:
    """``amount / k`` rounded down to Ray's resource granularity (1e-4), so ``k`` shares always fit."""
    return math.floor(amount / k * 10_000) / 10_000


# ---------------------------------------------------------------------------------------------------- feasibility
def check_feasible(
    requests: Sequence[GroupRequest],
    cluster_resources: Mapping[str, float] | None,
    nodes: Sequence[Mapping[str, Any]] | None,
) -> None:
    """Raise :class:`PlacementError` unless the alive nodes can hold all ``requests`` together (pure, no Ray).

    ``nodes`` is ``ray.nodes()`` (dead nodes are ignored); without it ``cluster_resources``
    (``ray.cluster_resources()``) is treated as one node. Checks: each resource's total, that one bundle fits on
    some node, that the nodes have enough bundle slots in all, and that each vLLM engine's ``tp`` bundles fit
    on a single node. The bundles of one plan all have the same shape, for which this slot count is exact.
    """
    caps = node_capacities(cluster_resources, nodes)
    totals: dict[str, float] = {}
    for _, cap in caps:
        for res, amount in cap.items():
            totals[res] = totals.get(res, 0.0) + amount
    need: dict[str, float] = {}
    for req in requests:
        for res, amount in req.bundle.items():
            need[res] = need.get(res, 0.0) + amount * req.num_bundles

    problems = [
        f"{need[res]:g} {res} requested, the cluster has {totals.get(res, 0):g}"
        for res in sorted(need)
        if need[res] > totals.get(res, 0.0) + EPS
    ]
    if not problems:
        problems = packing_problems(requests, caps)
    if problems:
        raise PlacementError(infeasible_message(requests, caps, problems))


# ------------------------------------------------------------------------------------------ groups Ray created
def node_aligned_blocks(
    blocks: Sequence[tuple[int, ...]], where: Mapping[int, str], label: str = "vllm"
) -> tuple[tuple[int, ...], ...]:
    """The bundles of ``blocks`` (one per engine, ``tp`` each) regrouped so that each block lies on one node
    (``where``: bundle -> node id); blocks already on one node keep their place. Pure."""
    tp = len(blocks[0])
    keep = [b for b in blocks if len({where.get(x) for x in b}) == 1]
    loose: dict[str, list[int]] = {}
    for b in blocks:
        if b not in keep:
            for x in b:
                loose.setdefault(where.get(x), []).append(x)
    new = [tuple(sorted(xs)[i : i + tp]) for xs in loose.values() for i in range(0, len(xs) - tp + 1, tp)]
    if len(keep) + len(new) < len(blocks):
        raise PlacementError(
            f"{label}: Ray spread the bundles of the vLLM engines over nodes so that only {len(keep) + len(new)} of "
            f"{len(blocks)} engines can have their {tp} tensor-parallel bundles on one node (per node: "
            f"{ {n: len(xs) for n, xs in loose.items()} }); an engine must run on one node. Free whole nodes "
            f"(or use a tensor_parallel_size that divides the free devices per node)."
        )
    return tuple(sorted(keep + new))

"""Whether a Ray cluster's alive nodes can hold a placement request, and the message when they cannot (pure, no Ray).

:func:`reasonrl.planning.placement_layout.check_feasible` compares the totals and then calls :func:`packing_problems`
(bundle slots per node, tensor-parallel blocks on one node); :func:`infeasible_message` writes what was asked, what
the cluster has, the problems and what to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reasonrl.planning.placement_layout import GroupRequest

EPS = 1e-6


def node_capacities(
    cluster_resources: Mapping[str, float] | None, nodes: Sequence[Mapping[str, Any]] | None
) -> list[tuple[str, dict[str, float]]]:
    def clean(resources: Mapping[str, float]) -> dict[str, float]:
        return {k: float(v) for k, v in resources.items() if not k.startswith("node:")}

    if nodes:
        alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
        return [
            (str(n.get("NodeManagerAddress") or n.get("NodeID", "?")), clean(n.get("Resources", {}))) for n in alive
        ]
    if cluster_resources:
        return [("cluster", clean(cluster_resources))]
    return []


def bundle_slots(cap: Mapping[str, float], bundle: Mapping[str, float]) -> int:
    """How many ``bundle``s fit into ``cap``."""
    return min(int(math.floor(cap.get(res, 0.0) / amount + EPS)) for res, amount in bundle.items() if amount > 0)


def packing_problems(requests: Sequence[GroupRequest], caps: list[tuple[str, dict[str, float]]]) -> list[str]:
    """Bundle-slot check per node: largest node-local blocks first, into the node with the most free slots."""
    problems = []
    by_shape: dict[tuple, list[GroupRequest]] = {}
    for req in requests:
        by_shape.setdefault(tuple(sorted(req.bundle.items())), []).append(req)
    for shape_key, reqs in by_shape.items():
        bundle = dict(shape_key)
        free = [bundle_slots(cap, bundle) for _, cap in caps]
        if not any(free):
            problems.append(f"one bundle {fmt_res(bundle)} fits on no alive node")
            continue
        for req in reqs:
            for block in sorted(req.node_local_blocks, key=len, reverse=True):
                best = max(range(len(free)), key=free.__getitem__)
                if free[best] < len(block):
                    problems.append(
                        f"{req.name}: a vLLM engine needs its {len(block)} tensor-parallel bundles on one node, "
                        f"and no alive node has {len(block)} free bundle slots ({fmt_res(bundle)} each) left; "
                        f"largest has {free[best]}"
                    )
                    return problems
                free[best] -= len(block)
        singles = sum(r.num_bundles - sum(len(b) for b in r.node_local_blocks) for r in reqs)
        if singles > sum(free):
            total_slots = sum(bundle_slots(cap, bundle) for _, cap in caps)
            problems.append(
                f"{sum(r.num_bundles for r in reqs)} bundles of {fmt_res(bundle)} requested, the alive nodes "
                f"have room for {total_slots} (per node: {[bundle_slots(cap, bundle) for _, cap in caps]})"
            )
    return problems


def infeasible_message(
    requests: Sequence[GroupRequest], caps: list[tuple[str, dict[str, float]]], problems: list[str]
) -> str:
    roles = list(dict.fromkeys(r for req in requests for r in req.roles))  # requests are in role order
    gpu = any(req.bundle.get("GPU", 0) > 0 for req in requests)
    has_gpu = any(cap.get("GPU", 0) > 0 for _, cap in caps)
    lines = [f"placement for {', '.join(roles)} cannot be satisfied by this Ray cluster (checked before waiting):"]
    lines += ["  asked for:"] + [f"    {req.describe()}" for req in requests]
    lines += ["  cluster has: " + describe_cluster(caps)]
    lines += ["  problem: " + p for p in problems]
    fixes = []
    if gpu and not has_gpu:
        fixes.append("this cluster has no GPU: use device='cpu' (CPU bundles) or join GPU nodes")
    fixes.append(
        "reduce num_nodes / devices_per_node of the roles above (vllm: num_engines / tensor_parallel_size)"
        + (
            ""
            if len(requests) == 1
            else ", or colocate roles (colocate_all, colocate_policy_ref, colocate_critic_reward)"
        )
    )
    if not gpu:
        fixes.append(
            "on a CPU machine: lower cpus_per_bundle or start Ray with more logical CPUs (ray start --num-cpus=N)"
        )
    fixes.append("add nodes: run `ray start --address=<head-ip>:6379` on each extra machine")
    lines += ["  to fix:"] + [f"    - {fix}" for fix in fixes]
    return "\n".join(lines)


def describe_cluster(caps: list[tuple[str, dict[str, float]]]) -> str:
    if not caps:
        return "no alive node"
    totals: dict[str, float] = {}
    for _, cap in caps:
        for res, amount in cap.items():
            totals[res] = totals.get(res, 0.0) + amount
    n = len(caps)
    text = f"{n} alive node{'s' if n != 1 else ''} with {fmt_devices(totals)}"
    if n > 1:
        shown = "; ".join(f"{addr}: {fmt_devices(cap)}" for addr, cap in caps[:8])
        text += f" in all ({shown}{'; ...' if n > 8 else ''})"
    return text


def fmt_devices(res: Mapping[str, float]) -> str:
    return f"{res.get('GPU', 0):g} GPU, {res.get('CPU', 0):g} CPU"


def fmt_res(res: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in res.items()) + "}"

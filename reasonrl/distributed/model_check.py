"""Before any engine or DeepSpeed rank starts: is every model on every node that will load it?

The driver sends each actor a model *source* (a Hub id pinned to its commit, ``owner/name@<commit>``, or a local
folder), and each actor resolves it on its own node (:func:`reasonrl.utils.hub.local_model_folder`): the commit's
snapshot in that node's HF cache, downloaded there when the node is online. Without a shared cache a node may lack
it; offline it then cannot get it, and an actor would fail only after the other roles spent minutes starting.

:func:`check_models_on_nodes` asks every node of the placement at once, before any actor starts: one tiny Ray task
per node (``num_cpus=0``, hard node affinity, the offline/cache variables the role's actors there get), which
resolves every source that node's actors will load, downloading it there when online (so ranks sharing a node do
not race to download). Every node that lacks a model is reported in one :class:`ModelsNotOnNodesError`, with the
model, its commit, the node's cache and what to do; nothing else has started by then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from loguru import logger

# Variables that decide where a node's actors look for a model: passed to the check exactly as the actors get them.
HF_ENV_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")


class ModelsNotOnNodesError(RuntimeError):
    """Some nodes lack a model their actors would load; ``problems`` has one line per node and model."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("models missing on some nodes:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclasses.dataclass
class NodeModels:
    """What one node's check found: each source's folder there, or why it cannot be loaded there."""

    node_id: str
    name: str  # the node as messages name it: address, host name, start of the Ray node id
    cache: str  # the node's HF cache folder
    folders: dict[str, str]
    problems: dict[str, str]


def role_nodes(plan: Any, role: str) -> list[str]:
    """The Ray node ids the actors of ``role`` run on (every bundle of their blocks), in bundle order."""
    placement = plan[role]
    where = plan.bundle_nodes.get(placement.group_name, {})
    nodes = [where.get(b) for block in placement.engine_bundle_indices for b in block]
    return list(dict.fromkeys(n for n in nodes if n))


def node_needs(plan: Any, sources: Mapping[str, str]) -> dict[str, dict[str, list[str]]]:
    """``{node id: {source: [roles]}}``: which model sources each node's actors load (``sources``: role -> source,
    for the roles of ``plan``)."""
    needs: dict[str, dict[str, list[str]]] = {}
    for role, source in sources.items():
        if role in plan:
            for node in role_nodes(plan, role):
                needs.setdefault(node, {}).setdefault(source, []).append(role)
    return needs


def _node_env(plan: Any, roles: list[str]) -> dict[str, str]:
    """The HF variables the actors of ``roles`` get from their placement (``HF_HUB_OFFLINE=1`` on CPU bundles)."""
    env = plan[roles[0]].env_vars(0)
    return {k: env[k] for k in HF_ENV_VARS if k in env}


def _check_here(sources: list[str], address: str, node_id: str) -> dict[str, Any]:
    """Runs on the node: each source resolved as an actor there would (downloaded when online)."""
    from reasonrl.utils.hub import hub_cache_dir, local_model_folder, node_name

    host = node_name()
    name = f"node {address}" + (f" (host {host}, " if host != address else " (") + f"Ray node {node_id[:12]})"
    folders, problems = {}, {}
    for source in sources:
        try:
            folders[source] = local_model_folder(source, where=name)
        except OSError as error:  # ModelNotOnNodeError, or a folder that cannot be read
            problems[source] = str(error)
    return dict(node_id=node_id, name=name, cache=str(hub_cache_dir()), folders=folders, problems=problems)


def check_models_on_nodes(plan: Any, sources: Mapping[str, str], *, even_on_one_node: bool = False) -> dict:
    """Resolve every model source on every node that loads it (``sources``: role -> source; nodes from
    ``plan.bundle_nodes``), one Ray task per node, all at once. Returns ``{node id: NodeModels}``; raises
    :class:`ModelsNotOnNodesError` naming every node and model that is missing.

    A one-node cluster that is the driver's own node (a local instance) is not asked unless ``even_on_one_node``:
    the driver resolved every model there already, so the task would only cost a worker start."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    alive = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}
    if not even_on_one_node and list(alive) == [ray.get_runtime_context().get_node_id()]:
        return {}
    needs = node_needs(plan, sources)
    check = ray.remote(_check_here)
    refs = {}
    for node, by_source in needs.items():
        roles = [r for rs in by_source.values() for r in rs]
        options = dict(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            runtime_env={"env_vars": _node_env(plan, roles)},
        )
        refs[node] = check.options(**options).remote(list(by_source), alive.get(node, "?"), node)
    logger.info(f"checking {len(set(sources.values()))} model(s) on {len(needs)} node(s) before start-up")
    found = {node: NodeModels(**ray.get(ref)) for node, ref in refs.items()}
    problems = [
        f"{', '.join(needs[node][source])}: {problem}"
        for node, entry in found.items()
        for source, problem in entry.problems.items()
    ]
    if problems:
        raise ModelsNotOnNodesError(problems)
    return found

"""Before any DeepSpeed rank starts: is the checkpoint folder one folder on every node that writes into it?

A checkpoint is written by several processes: the driver (``trainer_state.json``, the ``COMPLETE`` marker, the
data sampler's state) and every rank of the trainable roles (each writes its own ZeRO shards and optimizer state,
rank 0 the exported Hugging Face policy). On one machine that is one folder. Across machines ``ckpt_dir`` must be
storage every node mounts at the same path (NFS, Lustre, a cloud bucket through FUSE, ...); on a node-local disk
each node keeps a piece, the checkpoint looks complete to the driver, and a resume loads shards that are not there
(or an older run's), minutes or hours later.

:func:`check_dirs_shared` settles it before start-up, by experiment rather than by guessing from file-system types:
the driver writes a marker with a random token into the folder, one tiny Ray task per other node that will write
there (``num_cpus=0``, hard node affinity) reads it back through the same path string the ranks get and writes its
own marker, which the driver then reads. A node that does not see the driver's marker, or whose marker the driver
cannot see, does not share the folder; every such node is named in one :class:`DirsNotSharedError`, with the path
as that node resolved it. Nothing is asked when every writing role runs on the driver's own node (one machine).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from loguru import logger

# The roles whose ranks write into the checkpoint (frozen roles and engines only read models)
WRITING_ROLES = ("policy", "critic")
MARKER_PREFIX = ".reasonrl-shared-check"


class DirsNotSharedError(RuntimeError):
    """Some nodes that write into a folder do not share it with the driver; ``problems`` has one line per node."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("folders not shared between nodes:\n" + "\n".join(f"  - {p}" for p in problems))


def writing_nodes(plan: Any, roles: Iterable[str] = WRITING_ROLES) -> dict[str, list[str]]:
    """``{node id: [roles]}`` of the nodes whose ranks write checkpoints (``plan.bundle_nodes``, every bundle of
    each placed writing role)."""
    nodes: dict[str, list[str]] = {}
    for role in roles:
        if role not in plan:
            continue
        placement = plan[role]
        where = plan.bundle_nodes.get(placement.group_name, {})
        for block in placement.engine_bundle_indices:
            for bundle in block:
                node = where.get(bundle)
                if node and role not in nodes.setdefault(node, []):
                    nodes[node].append(role)
    return nodes


def _probe_here(folder: str, name: str, token: str, node_id: str) -> dict[str, Any]:
    """Runs on the node: the driver's marker as this node sees ``folder``, then this node's own marker."""
    import socket

    resolved = os.path.abspath(folder)
    marker = os.path.join(resolved, name)
    try:
        with open(marker, encoding="utf-8") as f:
            seen = f.read() == token
    except OSError:
        seen = False
    wrote, error = None, None
    if seen:
        wrote = os.path.join(resolved, f"{name}.{node_id[:12]}")
        try:
            with open(wrote, "w", encoding="utf-8") as f:
                f.write(token)
        except OSError as exc:
            wrote, error = None, f"{type(exc).__name__}: {exc}"
    return dict(host=socket.gethostname(), resolved=resolved, seen=seen, wrote=wrote, error=error)


def shared_dir_problems(field: str, folder: str, results: Mapping[str, dict], roles: Mapping[str, list[str]]) -> list:
    """One line per node of ``results`` (node id -> :func:`_probe_here`'s answer, plus ``back``: whether the driver
    read that node's marker) that does not share ``folder`` with the driver."""
    problems = []
    for node, r in results.items():
        where = (
            f"node {r['host']} (Ray node {node[:12]}; {', '.join(roles.get(node, []))} ranks write checkpoints there)"
        )
        if not r["seen"]:
            why = f"it does not see the driver's files in {field}={folder!r} (there it is {r['resolved']!r})"
        elif r["error"]:
            why = f"it cannot write into {field}={folder!r} ({r['error']})"
        elif not r["back"]:
            why = f"the driver does not see what it wrote into {field}={folder!r} ({r['resolved']!r})"
        else:
            continue
        problems.append(
            f"{where}: {why}. Checkpoints of a run across nodes go to storage every node mounts at the same path "
            f"(NFS, Lustre, a bucket through FUSE): set {field} to such a folder, or place the policy and critic "
            "on the driver's node"
        )
    return problems


def check_dirs_shared(plan: Any, folders: Mapping[str, str], *, even_on_one_node: bool = False) -> dict:
    """Every node whose ranks write checkpoints (:data:`WRITING_ROLES`) shares each of ``folders`` (config field
    -> path; created on the driver) with the driver. One task per node, all at once; returns ``{node id: answer}``
    per folder field; raises :class:`DirsNotSharedError` naming every node that does not share one.

    The driver's own node is not asked (it shares its folders with itself), unless ``even_on_one_node`` (tests):
    a placement whose writing roles all run on the driver's node costs nothing."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    roles = writing_nodes(plan)
    nodes = [n for n in roles if even_on_one_node or n != here]
    if not nodes:
        return {}
    probe = ray.remote(_probe_here)
    found: dict[str, dict] = {}
    problems: list[str] = []
    for field, folder in folders.items():
        Path(folder).mkdir(parents=True, exist_ok=True)
        token, name = secrets.token_hex(16), f"{MARKER_PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        marker = Path(folder) / name
        marker.write_text(token, encoding="utf-8")
        try:
            refs = {
                node: probe.options(
                    num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                ).remote(folder, name, token, node)
                for node in nodes
            }
            results = {node: ray.get(ref) for node, ref in refs.items()}
            for node, r in results.items():
                back = Path(folder) / f"{name}.{node[:12]}"
                r["back"] = back.is_file() and back.read_text(encoding="utf-8") == token
        finally:
            for stale in Path(folder).glob(f"{name}*"):
                stale.unlink(missing_ok=True)
        found[field] = results
        problems += shared_dir_problems(field, folder, results, roles)
    logger.info(f"checked that {len(nodes)} other node(s) share {', '.join(folders)} with the driver")
    if problems:
        raise DirsNotSharedError(problems)
    return found

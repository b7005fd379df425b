"""Models on several nodes: a 2-raylet Ray cluster whose nodes have separate HF caches.

Run as ``python model_nodes_probe.py OUT.json WORKDIR`` (its own process: the test session has its own Ray
instance). ``WORKDIR`` gets two Hugging Face Hub caches, ``cache_a`` holding ``tiny-org/tiny-qwen`` (the tiny model
as a snapshot at ``COMMIT``, ``refs/main`` pointing at it) and ``cache_b`` empty. Node A (the head, the driver's
node) is started with ``HF_HUB_CACHE=cache_a``, node B with ``HF_HUB_CACHE=cache_b``: ``Cluster.add_node`` takes
``env_vars`` (Ray 2.60 ``RayParams.env_vars``: "Override environment variables for the raylet"), which the raylet's
worker processes inherit, just as two machines whose ``ray start`` ran with different ``HF_HOME``. The driver runs
with ``cache_a`` and ``HF_HUB_OFFLINE=1`` (CPU placements give every actor ``HF_HUB_OFFLINE=1`` too).

Steps, each recorded in OUT.json:

1. the driver pins ``tiny-org/tiny-qwen`` to its commit; a placement of a policy rank and a vLLM engine (one CPU
   bundle each, on nodes of one CPU) puts one on each node;
2. the pre-flight check of a real run (``reasonrl.run.launch.check_models_on_nodes`` of a ``TinyGRPOCPUConfig`` whose
   ``pretrain`` is the Hub id): a ConfigError naming node B only;
3. the snapshot copied into ``cache_b``: the check passes and each node resolved the id to its own cache's folder;
4. an actor with the options of the role placed on node B resolves the pinned id there and reads the model's config
   (the ``local_model_folder`` call the DeepSpeed workers and the vLLM engine make before loading).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

REPO = "tiny-org/tiny-qwen"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hub_cache(root: Path, model: Path | None) -> Path:
    """A Hub cache at ``root`` holding ``REPO`` at ``COMMIT`` (= main) as a copy of ``model``, or empty."""
    root.mkdir(parents=True, exist_ok=True)
    if model is not None:
        repo = root / f"models--{REPO.replace('/', '--')}"
        shutil.copytree(model, repo / "snapshots" / COMMIT)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(COMMIT)
    return root


def main(out_path: str, workdir: str) -> None:
    from reasonrl.models import tiny_model_path

    work = Path(workdir)
    tiny = tiny_model_path()  # built (or found in its cache) before the caches change
    cache_a, cache_b = hub_cache(work / "cache_a", tiny), hub_cache(work / "cache_b", None)
    os.environ.update(HF_HUB_CACHE=str(cache_a), HF_HUB_OFFLINE="1")
    os.environ.pop("HF_HOME", None)

    import ray
    from ray.cluster_utils import Cluster

    start = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=1,
            resources={"node_a": 1},
            env_vars={"HF_HUB_CACHE": str(cache_a)},
            gcs_server_port=_free_port(),
            include_dashboard=False,
        ),
    )
    cluster.add_node(num_cpus=1, resources={"node_b": 1}, env_vars={"HF_HUB_CACHE": str(cache_b)})
    cluster.wait_for_nodes()
    result: dict = {}
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        result["cluster_start_s"] = time.monotonic() - start
        result |= _steps(cache_a, cache_b)
    finally:
        ray.shutdown()
        cluster.shutdown()
    result["total_s"] = time.monotonic() - start
    Path(out_path).write_text(json.dumps(result, indent=1))


def _steps(cache_a: Path, cache_b: Path) -> dict:
    import ray

    from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
    from reasonrl.config import ConfigError
    from reasonrl.distributed.model_check import check_models_on_nodes
    from reasonrl.distributed.placement import RoleResources, VLLMResources, build_placement
    from reasonrl.run.launch import check_models_on_nodes as check_before_start

    out: dict = {}
    nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    out["nodes"] = {name: next(i for i, n in nodes.items() if name in n["Resources"]) for name in ("node_a", "node_b")}
    cfg = TinyGRPOCPUConfig(pretrain=REPO, eval_data=(), kl_mode="none", vllm_num_engines=1)
    out["pinned"] = cfg.pin_models()
    t0 = time.monotonic()
    plan = build_placement(
        {"policy": RoleResources(1, 1), "vllm": VLLMResources(1, 1)}, device="cpu", ready_timeout_s=30
    )
    try:
        out["bundle_nodes"] = plan.bundle_nodes
        out["role_nodes"] = {
            role: plan.bundle_nodes[p.group_name][p.bundle_indices[0]] for role, p in plan.roles.items()
        }
        try:
            check_before_start(cfg, plan)
            out["missing_error"] = None
        except ConfigError as err:
            out["missing_error"] = str(err)
        out["missing_check_s"] = time.monotonic() - t0

        shutil.copytree(cache_a / f"models--{REPO.replace('/', '--')}", cache_b / f"models--{REPO.replace('/', '--')}")
        t0 = time.monotonic()
        found = check_models_on_nodes(plan, {"policy": cfg.model_source(cfg.pretrain), "vllm": cfg.pretrain})
        out["present_check_s"] = time.monotonic() - t0
        out["found"] = {node: dict(name=e.name, cache=e.cache, folders=e.folders) for node, e in found.items()}

        on_b = next(p for role, p in plan.roles.items() if out["role_nodes"][role] == out["nodes"]["node_b"])
        actor = ray.remote(Loader).options(**on_b.actor_options(0)).remote()
        out["actor"] = ray.get(actor.load.remote(cfg.pretrain), timeout=60)
        ray.kill(actor)
    finally:
        plan.remove()
    out["cache_a"], out["cache_b"] = str(cache_a), str(cache_b)
    return out


class Loader:
    """Stands in for a vLLM engine / DeepSpeed rank: resolves the source where it runs and reads its config."""

    def load(self, source: str) -> dict:
        import ray
        from transformers import AutoConfig

        from reasonrl.utils.hub import local_model_folder

        folder = local_model_folder(source)
        config = AutoConfig.from_pretrained(folder)
        return dict(node_id=ray.get_runtime_context().get_node_id(), folder=folder, model_type=config.model_type)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""A training run across two nodes: the code demo's recipe on a 2-raylet ``ray.cluster_utils.Cluster``.

Run as ``python two_node_run_probe.py OUT.json WORKDIR`` (its own process: the test session has its own Ray
instance, and one driver process cannot hold two). Node A is the head (the driver's node), node B a second raylet
with its own Hugging Face cache (``Cluster.add_node(env_vars=...)``: its workers inherit it, as on a machine whose
``ray start`` ran with another ``HF_HUB_CACHE``). Bundles of 2 CPUs on nodes of 2 (A) and 3 (B) CPUs: the policy's
and the engine's bundles cannot share a node, so the run spans both. Ray 2.60 puts the engine's group (created
first) on the node it fills exactly, A, the driver's, and the policy on B; the reward actor (``reward_num_cpus=1``)
takes the CPU left on B. So the policy's rank writes its ZeRO shards on a node other than the driver's, and the
sandbox runs on a node other than the driver's.

Steps, each recorded in OUT.json:

1. ``playground.code_grpo_cpu`` (``code-sft``, the sandbox reward on a reward actor) for 2 steps, saving each step:
   before any rank starts, the run checks that the policy's node shares ``ckpt_dir`` with the driver
   (:mod:`reasonrl.distributed.shared_dirs`); where each actor ran (Ray's actor table);
2. the same command with ``max_steps=3``: it resumes from ``step_2`` (the policy's ZeRO shards written on its node,
   the trainer state on the driver's) and trains step 3 only;
3. the check itself on the live cluster: a folder both nodes see passes; the node that does not see the driver's
   marker is named (the folder given to node B's probe differs: a node-local disk, as two machines would have).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_config(work: Path, address: str, steps: int):
    from playground.code_grpo_cpu import CodeGRPOCPUConfig

    return CodeGRPOCPUConfig(
        exp_name="two_nodes",
        ray_address=address,
        ckpt_dir=str(work / "ckpt"),
        log_dir=str(work / "logs"),
        colocate_all=False,
        cpus_per_bundle=2.0,
        kl_mode="none",  # no reference group: two groups of one bundle, one per node
        init_kl_coef=0.0,
        reward_num_cpus=1,
        rollout_batch_size=8,
        n_samples_per_prompt=4,
        max_steps=steps,
        save_interval=1,
        keep_last_ckpts=3,
        eval_interval=0,
        eval_before_training=False,
        eval_data=(),
        progress_bar=False,
        resume="auto",
    )


def actor_nodes(names: dict[str, str]) -> dict[str, list[str]]:
    """``{actor class: [node name]}`` of every actor the run started (alive or dead), from the GCS actor table
    (Ray's public state API needs the dashboard, which these nodes do not start)."""
    from ray._private import state

    out: dict[str, list[str]] = {}
    for actor in state.actors().values():
        node = (actor.get("Address") or {}).get("NodeID", "?")
        out.setdefault(actor.get("ActorClassName", "?"), []).append(names.get(node, node))
    return out


def main(out_path: str, workdir: str) -> None:
    from reasonrl.sft.warm_start import code_warm_start_path

    work = Path(workdir)
    code_warm_start_path()  # built (or found in its cache) by the driver before the cluster starts
    hf_b = work / "hf_cache_b"
    hf_b.mkdir(parents=True, exist_ok=True)

    import ray
    from ray.cluster_utils import Cluster

    start = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(num_cpus=2, resources={"node_a": 1}, gcs_server_port=_free_port(), include_dashboard=False),
    )
    cluster.add_node(num_cpus=3, resources={"node_b": 1}, env_vars={"HF_HUB_CACHE": str(hf_b)})
    cluster.wait_for_nodes()
    result: dict = {}
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        names = {}
        for n in ray.nodes():
            names[n["NodeID"]] = "A" if "node_a" in n["Resources"] else "B"
        result["cluster_start_s"] = time.monotonic() - start
        result |= _steps(work, cluster.address, names)
    finally:
        ray.shutdown()
        cluster.shutdown()
    result["total_s"] = time.monotonic() - start
    Path(out_path).write_text(json.dumps(result, indent=1))


def _steps(work: Path, address: str, names: dict[str, str]) -> dict:
    from reasonrl.exp import BasePPOExp
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    out: dict = {}
    t0 = time.monotonic()
    BasePPOExp(run_config(work, address, steps=2)).run()
    out["first_run_s"] = time.monotonic() - t0
    out["actors_first"] = actor_nodes(names)
    ckpt = work / "ckpt" / "two_nodes"
    out["checkpoints_first"] = sorted(p.name for p in ckpt.glob("step_*") if (p / "COMPLETE").exists())
    out["policy_shards_step_2"] = sorted(str(p.relative_to(ckpt)) for p in (ckpt / "step_2").rglob("*.pt"))

    t0 = time.monotonic()
    BasePPOExp(run_config(work, address, steps=3)).run()
    out["resumed_run_s"] = time.monotonic() - t0
    out["checkpoints_after"] = sorted(p.name for p in ckpt.glob("step_*") if (p / "COMPLETE").exists())
    rows = metrics_by_step(read_metrics(work / "logs" / "two_nodes" / "metrics.jsonl"))
    out["trained_steps"] = sorted(s for s, r in rows.items() if "reward/mean" in r)
    out["rewards"] = {s: rows[s]["reward/mean"] for s in out["trained_steps"]}
    out["train_log_resume"] = [
        line.strip()
        for line in (work / "logs" / "two_nodes" / "train.log").read_text().splitlines()
        if "resum" in line.lower()
    ][:5]
    out |= _check_on_the_cluster(work, names)
    return out


def _check_on_the_cluster(work: Path, names: dict[str, str]) -> dict:
    """check_dirs_shared on a placement with the policy on node B: passes for a shared folder; for a folder that
    node B resolves elsewhere (its probe is handed another path, as a node-local disk would be), names node B."""

    from reasonrl.distributed import shared_dirs
    from reasonrl.distributed.placement import RoleResources, build_placement

    out: dict = {}
    plan = build_placement({"policy": RoleResources(1, 1)}, device="cpu", cpus_per_bundle=2.0, ready_timeout_s=30)
    try:
        policy_node = plan.bundle_nodes[plan["policy"].group_name][0]
        out["check_policy_node"] = names[policy_node]
        found = shared_dirs.check_dirs_shared(plan, {"ckpt_dir": str(work / "shared")}, even_on_one_node=True)
        out["check_shared"] = {names[n]: r["seen"] and r["back"] for n, r in found["ckpt_dir"].items()}
        out["check_left_markers"] = sorted(p.name for p in (work / "shared").iterdir())
        # node B's probe gets another folder than the driver wrote into: what a node-local disk looks like
        real_probe = shared_dirs._probe_here
        elsewhere = str(work / "node_local_b")
        os.makedirs(elsewhere, exist_ok=True)
        shared_dirs._probe_here = lambda folder, *a: real_probe(elsewhere, *a)
        try:
            shared_dirs.check_dirs_shared(plan, {"ckpt_dir": str(work / "local")}, even_on_one_node=True)
            out["check_local_error"] = None
        except shared_dirs.DirsNotSharedError as err:
            out["check_local_error"] = str(err)
        finally:
            shared_dirs._probe_here = real_probe
    finally:
        plan.remove()
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1], sys.argv[2])

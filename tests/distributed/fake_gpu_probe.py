"""Fake-GPU placement probe: a multi-node Ray cluster advertising GPUs, on a machine without any.

Run as ``python fake_gpu_probe.py OUT.json`` (in its own process: the test session has its own Ray instance).
Starts ``NODES`` raylets of ``GPUS_PER_NODE`` fake GPUs each, builds reasonrl's placement for the layouts in
``LAYOUTS`` (the shapes of the playground GPU recipes, scaled down: colocate_all with tensor-parallel engines and
fractional GPUs, and the split placement of ``qwen32b_ppo``), starts one light dummy actor per real actor with
the options reasonrl gives the real one (``RolePlacement.actor_options``), and lets each dummy vLLM engine start its
tensor-parallel workers the way vLLM 0.32's ``RayExecutorV2`` does (``vllm/v1/executor/ray_executor_v2.py``:
``get_current_placement_group()``, then per rank ``num_cpus=0``, ``num_gpus=VLLM_RAY_PER_WORKER_GPUS`` on bundle
``VLLM_RAY_BUNDLE_INDICES[rank]``, or the group's first GPU bundles without that variable). Every actor reports
its node, GPU ids and the device functions of ``reasonrl.distributed.platform`` as they run inside it. An actor
that cannot be scheduled is reported as ``"unscheduled"`` after ``SCHEDULE_TIMEOUT_S`` instead of hanging.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time

NODES = 3
GPUS_PER_NODE = 4
CPUS_PER_NODE = 4
SCHEDULE_TIMEOUT_S = 20

# (name, config overrides): the structure of the GPU recipes on 12 fake GPUs.
LAYOUTS = {
    # qwen7b_ppo / qwen1p5b_ppo shape with tp 2: policy + critic + engines on the same bundles, 1/3 GPU each.
    "colocate_all_tp2": dict(
        colocate_all=True,
        colocate_policy_ref=True,
        colocate_critic_reward=True,
        policy_num_nodes=2,
        policy_devices_per_node=2,
        critic_num_nodes=2,
        critic_devices_per_node=2,
        vllm_num_engines=2,
        vllm_tensor_parallel_size=2,
        advantage_estimator="gae",
        kl_mode="none",
    ),
    # qwen32b_ppo shape: policy, critic and engines of tp 4 in separate groups, whole GPUs.
    "split_tp4": dict(
        colocate_all=False,
        colocate_policy_ref=True,
        colocate_critic_reward=True,
        policy_num_nodes=1,
        policy_devices_per_node=2,
        critic_num_nodes=1,
        critic_devices_per_node=2,
        vllm_num_engines=2,
        vllm_tensor_parallel_size=4,
        advantage_estimator="gae",
        kl_mode="none",
    ),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _facts() -> dict:
    """What an actor sees of its own placement (runs inside the actor)."""
    import ray

    from reasonrl.distributed import platform

    ctx = ray.get_runtime_context()
    keys = ("REASONRL_DEVICE", "DS_ACCELERATOR", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE")
    keys += ("VLLM_RAY_BUNDLE_INDICES", "VLLM_RAY_PER_WORKER_GPUS")
    return dict(
        node_id=ctx.get_node_id(),
        gpu_ids=[str(g) for g in ray.get_gpu_ids()],
        env={k: os.environ.get(k) for k in keys},
        placed_device=platform.placed_device(),
        dist_backend=platform.dist_backend(),
    )


def main(out_path: str) -> None:
    import ray
    from ray.cluster_utils import Cluster

    start = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=CPUS_PER_NODE, num_gpus=GPUS_PER_NODE, gcs_server_port=_free_port(), include_dashboard=False
        ),
    )
    for _ in range(NODES - 1):
        cluster.add_node(num_cpus=CPUS_PER_NODE, num_gpus=GPUS_PER_NODE)
    cluster.wait_for_nodes()
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        result = {"cluster_start_s": time.monotonic() - start, "layouts": _run_layouts()}
    finally:
        ray.shutdown()
        cluster.shutdown()
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


def _run_layouts() -> dict:
    import ray

    from playground.qwen7b_ppo import Qwen7BPPOConfig
    from reasonrl.distributed.placement import build_placement

    layouts: dict = {}

    @ray.remote
    class TPWorker:
        def facts(self):
            return _facts()

    @ray.remote
    class Dummy:
        def facts(self):
            return _facts()

        def start_tp_workers(self, tp: int) -> list:
            """vLLM 0.32 ``RayExecutorV2._init_executor`` steps 1-5, with dummy workers."""
            from ray.util.placement_group import get_current_placement_group
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            pg = get_current_placement_group()
            if os.environ.get("VLLM_RAY_BUNDLE_INDICES"):
                bundles = [int(b) for b in os.environ["VLLM_RAY_BUNDLE_INDICES"].split(",")]
            else:  # vLLM's default: the group's GPU bundles, driver node first, first world_size of them
                bundles = [i for i, b in enumerate(pg.bundle_specs) if b.get("GPU", 0)][:tp]
            per_worker = float(os.environ.get("VLLM_RAY_PER_WORKER_GPUS", "1.0"))
            self.workers = [
                TPWorker.options(
                    num_cpus=0,
                    num_gpus=per_worker,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=pg, placement_group_bundle_index=b
                    ),
                ).remote()
                for b in bundles
            ]
            refs = [w.facts.remote() for w in self.workers]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=SCHEDULE_TIMEOUT_S)
            done = set(ready)
            return [
                dict(bundle=b, per_worker_gpus=per_worker) | (ray.get(r) if r in done else {"unscheduled": True})
                for b, r in zip(bundles, refs, strict=True)
            ]

    for name, overrides in LAYOUTS.items():
        t0 = time.monotonic()
        cfg = Qwen7BPPOConfig(**overrides)
        device = cfg.resolved_device(ray.cluster_resources())
        plan = build_placement(cfg.role_resources(), device=device, ready_timeout_s=30, **cfg.placement_kwargs())
        layout: dict = {
            "device": device,
            "bundle_nodes": {k: {str(b): n for b, n in v.items()} for k, v in plan.bundle_nodes.items()},
            "roles": {},
        }
        actors = []
        for role, placement in plan.roles.items():
            entries = []
            for i in range(placement.num_actors):
                options = placement.actor_options(i)
                actor = Dummy.options(**options).remote()
                actors.append(actor)
                entries.append(
                    dict(
                        actor=actor,
                        bundle=placement.bundle_indices[i],
                        block=placement.engine_bundle_indices[i],
                        group=placement.group_name,
                        num_gpus=options["num_gpus"],
                        num_cpus=options["num_cpus"],
                        ref=actor.facts.remote(),
                    )
                )
            ready, _ = ray.wait([e["ref"] for e in entries], num_returns=len(entries), timeout=SCHEDULE_TIMEOUT_S)
            for e in entries:
                e["facts"] = ray.get(e["ref"]) if e["ref"] in ready else {"unscheduled": True}
            if role == "vllm":
                for e in entries:
                    if "unscheduled" not in e["facts"]:
                        e["tp_workers"] = ray.get(e["actor"].start_tp_workers.remote(len(e["block"])), timeout=60)
            layout["roles"][role] = [{k: v for k, v in e.items() if k not in ("actor", "ref")} for e in entries]
        for actor in actors:
            ray.kill(actor)
        plan.remove()
        layout["seconds"] = time.monotonic() - t0
        layouts[name] = layout
    return layouts


if __name__ == "__main__":
    main(sys.argv[1])

"""GPU placement without a GPU: every playground GPU recipe's bundles, resources and per-actor environment.

Pure part (milliseconds, every recipe at full size): the placement plan of each ``playground/qwen*.py`` recipe on
a cluster of 8-GPU nodes, a ledger of what every actor (DeepSpeed ranks, vLLM engine actors and the tensor-parallel
workers vLLM 0.32's Ray executor starts from ``VLLM_RAY_BUNDLE_INDICES`` / ``VLLM_RAY_PER_WORKER_GPUS``) asks of
each bundle, and the environment each actor gets from its placement, whatever the driver sees.

Ray part (integration, one subprocess, ~45 s): ``fake_gpu_probe.py`` starts a 3-node Ray cluster advertising 4 fake
GPUs per node, builds the placement of the recipes' two shapes (colocate_all with tp-2 engines on fractional GPUs;
qwen32b_ppo's split placement with tp-4 engines), starts a light dummy actor with the real options for every actor,
and lets each dummy engine start its tensor-parallel workers the way vLLM's ``RayExecutorV2`` does.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from reasonrl.distributed import platform
from reasonrl.distributed.placement import role_placements
from reasonrl.planning.placement_layout import PlacementError, check_feasible, node_aligned_blocks, plan_groups

REPO = Path(__file__).resolve().parents[2]
GPU_RECIPES = sorted(p.stem for p in (REPO / "playground").glob("qwen*.py"))
GPUS_PER_NODE = 8


def recipe_config(name: str):
    module = importlib.import_module(f"playground.{name}")
    (cls,) = [
        v
        for k, v in vars(module).items()
        if k.endswith("Config") and isinstance(v, type) and v.__module__ == module.__name__
    ]
    return cls()


def recipe_roles(name: str):
    """(config, requests, RolePlacement per role) of a recipe planned on GPU bundles (no Ray)."""
    cfg = recipe_config(name)
    requests = plan_groups(cfg.role_resources(), device="gpu", **cfg.placement_kwargs())
    return cfg, requests, role_placements([(req, None) for req in requests], "gpu")


def bundle_ledger(roles) -> dict[tuple[str, int], dict[str, float]]:
    """GPU and CPU every actor asks of each ``(group, bundle)``, as Ray would count them, including the tp workers
    vLLM 0.32's ``RayExecutorV2`` starts for an engine: ``num_cpus=0``, ``num_gpus=VLLM_RAY_PER_WORKER_GPUS`` (1.0 by
    default) on the bundles of ``VLLM_RAY_BUNDLE_INDICES``, or on the group's first ``tp`` GPU bundles without it."""
    usage: dict[tuple[str, int], dict[str, float]] = defaultdict(lambda: {"GPU": 0.0, "CPU": 0.0})
    for role in roles.values():
        for i in range(role.num_actors):
            res = role.actor_resources(i)
            usage[role.group_name, role.bundle_indices[i]]["GPU"] += res["num_gpus"]
            usage[role.group_name, role.bundle_indices[i]]["CPU"] += res["num_cpus"]
            if role.role == "vllm" and role.tensor_parallel_size > 1:
                env = role.env_vars(i)
                bundles = env.get("VLLM_RAY_BUNDLE_INDICES")
                bundles = [int(b) for b in bundles.split(",")] if bundles else range(role.tensor_parallel_size)
                for b in bundles:
                    usage[role.group_name, b]["GPU"] += float(env.get("VLLM_RAY_PER_WORKER_GPUS", "1.0"))
    return usage


def fake_nodes(num_gpus: int, cpus_per_node: int = 64) -> list[dict]:
    return [
        {"Alive": True, "NodeManagerAddress": f"10.0.0.{i}", "Resources": {"GPU": GPUS_PER_NODE, "CPU": cpus_per_node}}
        for i in range(math.ceil(num_gpus / GPUS_PER_NODE))
    ]


# ---------------------------------------------------------------------------------------------------- pure
def test_there_are_gpu_recipes_to_check():
    assert {"qwen0p5b_ppo_1gpu", "qwen7b_ppo", "qwen32b_ppo"} <= set(GPU_RECIPES)


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_every_bundle_holds_what_its_actors_ask(name):
    cfg, requests, roles = recipe_roles(name)
    check_feasible(requests, None, fake_nodes(sum(r.num_bundles for r in requests)))  # tp blocks fit on 8-GPU nodes
    usage = bundle_ledger(roles)
    for req in requests:
        for b in range(req.num_bundles):
            asked = usage[req.name, b]
            assert asked["GPU"] <= req.bundle["GPU"] + 1e-6, f"{name}: bundle {b} of {req.name} over-asked: {asked}"
            assert asked["CPU"] <= req.bundle["CPU"] + 1e-6, f"{name}: bundle {b} of {req.name} over-asked: {asked}"
    vllm = roles["vllm"]
    assert vllm.num_actors == cfg.vllm_num_engines and vllm.tensor_parallel_size == cfg.vllm_tensor_parallel_size


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_each_engine_gets_exactly_its_own_bundles(name):
    _, _, roles = recipe_roles(name)
    vllm = roles["vllm"]
    seen: set[int] = set()
    for i in range(vllm.num_actors):
        env = vllm.env_vars(i)
        if vllm.tensor_parallel_size == 1:
            assert "VLLM_RAY_BUNDLE_INDICES" not in env and vllm.actor_resources(i)["num_gpus"] > 0
            continue
        bundles = [int(b) for b in env["VLLM_RAY_BUNDLE_INDICES"].split(",")]
        assert bundles == vllm.engine_bundle_indices[i] and bundles[0] == vllm.bundle_indices[i]
        assert not seen & set(bundles)
        seen |= set(bundles)
        assert float(env["VLLM_RAY_PER_WORKER_GPUS"]) == vllm.num_gpus_per_actor
        assert vllm.actor_resources(i)["num_gpus"] == 0  # the engine actor itself holds no GPU


def test_qwen32b_engines_are_16_tp4_blocks_each_on_one_node():
    _, requests, roles = recipe_roles("qwen32b_ppo")
    vllm = roles["vllm"]
    assert (vllm.num_actors, vllm.tensor_parallel_size) == (16, 4)
    assert [vllm.env_vars(i)["VLLM_RAY_BUNDLE_INDICES"] for i in (0, 15)] == ["0,1,2,3", "60,61,62,63"]
    (vreq,) = [r for r in requests if r.name == "vllm"]
    assert len(vreq.node_local_blocks) == 16
    assert sum(r.num_bundles for r in requests) == 128  # 16 nodes x 8 GPUs: policy 32, critic 32, vllm 64


def test_colocated_tp_workers_take_the_engine_share(monkeypatch):
    cfg = recipe_config("qwen7b_ppo").with_overrides({"vllm_num_engines": 16, "vllm_tensor_parallel_size": 2})
    roles = role_placements([(r, None) for r in cfg.placement_requests("gpu")], "gpu")
    env = roles["vllm"].env_vars(3)
    assert env["VLLM_RAY_BUNDLE_INDICES"] == "6,7" and env["VLLM_RAY_PER_WORKER_GPUS"] == "0.3333"
    usage = bundle_ledger(roles)
    assert all(abs(u["GPU"] - 3 * 0.3333) < 1e-6 for u in usage.values())  # policy + critic + one vLLM worker


def test_straddling_engine_blocks_are_realigned_to_nodes():
    # PACK put bundles 0-1 and 6-7 on node a, 2-5 on node b (as seen on the 3-node fake cluster)
    where = {0: "a", 1: "a", 2: "b", 3: "b", 4: "b", 5: "b", 6: "a", 7: "a"}
    assert node_aligned_blocks(((0, 1, 2, 3), (4, 5, 6, 7)), where) == ((0, 1, 6, 7), (2, 3, 4, 5))
    assert node_aligned_blocks(((0, 1), (2, 3)), where) == ((0, 1), (2, 3))  # already node-local: unchanged
    with pytest.raises(PlacementError, match="only 1 of 2 engines"):
        node_aligned_blocks(((0, 1, 2, 3), (4, 5, 6, 7)), {**where, 7: "c"})


def test_actor_env_comes_from_the_placement_not_the_driver(monkeypatch):
    platform.apply_runtime_env(on_gpu=False)  # a CPU driver's own defaults (as conftest sets them)
    _, _, roles = recipe_roles("qwen7b_grpo")
    for role in roles.values():
        env = role.env_vars(0)
        assert env["REASONRL_DEVICE"] == "gpu" and env["DS_ACCELERATOR"] == "cuda"
        assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1" and "VLLM_CPU_KVCACHE_SPACE" not in env
        assert "TORCHDYNAMO_DISABLE" not in env  # torch.compile stays vLLM's to use on GPU
    cpu_env = role_placements(
        [(r, None) for r in plan_groups(recipe_config("qwen7b_grpo").role_resources(), device="cpu")], "cpu"
    )["policy"].env_vars(0)
    assert cpu_env["REASONRL_DEVICE"] == "cpu" and cpu_env["DS_ACCELERATOR"] == "cpu"
    assert cpu_env["TORCHDYNAMO_DISABLE"] == "1"  # vLLM's sampler helpers run as plain torch on CPU
    cpu_tp = recipe_config("qwen32b_ppo")
    cpu_vllm = role_placements([(r, None) for r in cpu_tp.placement_requests("cpu")], "cpu")["vllm"]
    assert "VLLM_RAY_BUNDLE_INDICES" not in cpu_vllm.env_vars(0)  # CPU: vLLM's mp executor, no Ray workers
    monkeypatch.setenv("DS_ACCELERATOR", "xpu")  # a user's own export still wins ...
    monkeypatch.setattr(platform, "_SET_HERE", set())
    assert roles["policy"].env_vars(0)["DS_ACCELERATOR"] == "xpu"
    monkeypatch.setenv("REASONRL_DEVICE", "cpu")  # ... but never over the placement's device
    assert roles["policy"].env_vars(0)["REASONRL_DEVICE"] == "gpu"


def test_tp_engines_use_the_ray_executor_on_gpu_only(monkeypatch):
    from reasonrl.distributed.vllm_engine import _tp_backend

    monkeypatch.setenv("VLLM_RAY_BUNDLE_INDICES", "4,5")
    assert (_tp_backend(on_gpu=True), _tp_backend(on_gpu=False)) == ("ray", "mp")  # vllm-cpu has no Ray device key


def test_placed_device_reads_the_actor_env(monkeypatch):
    monkeypatch.setenv("REASONRL_DEVICE", "gpu")
    assert (platform.placed_device(), platform.device_type(), platform.dist_backend()) == ("gpu", "cuda", "nccl")
    monkeypatch.setenv("REASONRL_DEVICE", "cpu")
    assert (platform.placed_device(), platform.device_type(), platform.dist_backend()) == ("cpu", "cpu", "gloo")
    monkeypatch.setenv("REASONRL_DEVICE", "tpu")
    with pytest.raises(ValueError, match="REASONRL_DEVICE='tpu'"):
        platform.placed_device()


def test_auto_device_resolves_from_the_cluster(monkeypatch):
    import reasonrl.config as config_pkg

    cfg = recipe_config("qwen7b_ppo")
    monkeypatch.setattr(config_pkg, "_local_gpu_count", lambda: 0)
    assert cfg.resolved_device({"CPU": 16.0, "GPU": 32.0}) == "gpu"  # GPU-less head node, GPU workers
    assert cfg.resolved_device({"CPU": 16.0}) == "cpu"
    assert cfg.with_overrides({"device": "cpu"}).resolved_device({"GPU": 8.0}) == "cpu"


def test_joining_a_cluster_sends_no_device_env_from_the_driver(monkeypatch):
    import ray

    from reasonrl.distributed import ray_cluster

    platform.apply_runtime_env(on_gpu=False)
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"GPU": 8.0})
    monkeypatch.setattr(ray_cluster, "check_ray_address", lambda address: "10.0.0.1:6379")
    ray_cluster.init_ray("10.0.0.1:6379")
    env = calls[0]["runtime_env"]["env_vars"]
    assert "DS_ACCELERATOR" not in env and "VLLM_ENABLE_V1_MULTIPROCESSING" not in env and "REASONRL_DEVICE" not in env


# ---------------------------------------------------------------------------------------------------- Ray
@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """Run ``fake_gpu_probe.py`` once (its own Ray cluster, in its own process) and return its report."""
    out = tmp_path_factory.mktemp("fake_gpu") / "report.json"
    ray_tmp = Path("/tmp") / f"rrfg{os.getpid()}"  # short: Ray's socket paths must stay under 107 characters
    cpu, gpu = platform.runtime_env_vars(on_gpu=False), platform.runtime_env_vars(on_gpu=True)
    ours = {k for k, v in cpu.items() if gpu.get(k) != v}  # conftest's CPU defaults that a GPU driver lacks
    env = {k: v for k, v in os.environ.items() if k not in ours and k != "RAY_ADDRESS"}
    env |= {"RAY_TMPDIR": str(ray_tmp), "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("fake_gpu_probe.py")), str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    shutil.rmtree(ray_tmp, ignore_errors=True)  # the probe cluster's session logs
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def _actors(report):
    for name, layout in report["layouts"].items():
        for role, entries in layout["roles"].items():
            for e in entries:
                yield name, layout, role, e


@pytest.mark.integration
def test_fake_gpu_cluster_resolves_gpu_and_every_actor_schedules(probe):
    for name, layout, role, e in _actors(probe):
        facts = e["facts"]
        assert layout["device"] == "gpu", name
        assert "unscheduled" not in facts, f"{name}: {role} actor on bundle {e['bundle']} was never scheduled"
        assert facts["placed_device"] == "gpu" and facts["dist_backend"] == "nccl", (name, role)
        assert facts["env"]["DS_ACCELERATOR"] == "cuda" and facts["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
        if role == "vllm":
            assert facts["gpu_ids"] == [] and e["num_gpus"] == 0  # tp > 1: the engine actor holds no GPU
        else:
            assert len(facts["gpu_ids"]) == 1


@pytest.mark.integration
def test_fake_gpu_tp_workers_run_on_their_engine_bundles_on_one_node(probe):
    for name, layout, role, e in _actors(probe):
        if role != "vllm":
            continue
        nodes = layout["bundle_nodes"][e["group"]]
        workers = e["tp_workers"]
        assert [w["bundle"] for w in workers] == e["block"], name
        for w in workers:
            assert "unscheduled" not in w, f"{name}: tp worker on bundle {w['bundle']} was never scheduled"
            assert w["node_id"] == nodes[str(w["bundle"])] == e["facts"]["node_id"]  # one node, the engine's
        assert len({w["gpu_ids"][0] for w in workers}) == len(workers)  # distinct devices


@pytest.mark.integration
def test_fake_gpu_colocated_tp_workers_share_the_ranks_devices(probe):
    layout = probe["layouts"]["colocate_all_tp2"]
    policy = {e["bundle"]: (e["facts"]["node_id"], e["facts"]["gpu_ids"]) for e in layout["roles"]["policy"]}
    for e in layout["roles"]["vllm"]:
        for w in e["tp_workers"]:
            assert w["per_worker_gpus"] == pytest.approx(1 / 3, abs=1e-3)
            assert (w["node_id"], w["gpu_ids"]) == policy[w["bundle"]]  # the same device as that bundle's rank

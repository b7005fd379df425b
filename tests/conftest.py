"""Shared, expensive fixtures: built once per test session and reused by every test that needs them.

* one tiny model folder (cached on disk across sessions),
* one Ray cluster,
* one vLLM engine actor on the tiny model,
* a 2-rank DeepSpeed ZeRO-3 group (two Ray actors over gloo) for the module that uses it.

The Ray fixture checks on teardown that the session left nothing behind in ``/dev/shm``. ``make test`` runs two
pytest-xdist workers (each its own session of these fixtures), so every check of what a test left behind looks only
at this worker's processes and the entries they hold (``tests/fixtures/own_processes.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.own_processes import shm_entries, tag_this_session, wait_for_own_new_shm

from reasonrl.distributed.platform import apply_runtime_env
from reasonrl.sft.warm_start import register_offline_models

# Two workers share 2 cores: one torch/OpenMP thread per process, and threads that sleep instead of spinning at a
# barrier (measured: two tools demos side by side took 240 s each with the defaults, 136 s with these; alone, 76 s).
XDIST_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def pytest_configure(config):
    """The environment of a process that runs tests. The pytest-xdist controller runs none, and its workers inherit
    its environment: it sets nothing, or its values would pass for the user's own exports in the workers."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    apply_runtime_env()  # the same environment users get: CPU KV cache size, in-process vLLM on CPU, ...
    register_offline_models()  # pretrain=tiny & co. resolve in tests as in a run (the runners register them too)
    tag_this_session()  # what this process starts carries its tag (the leak checks tell it from another worker's)
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        for key, value in XDIST_WORKER_ENV.items():
            os.environ.setdefault(key, value)  # a value the user exported wins


# The slowest test files, slowest first (seconds of one `make test` on 2 cores, one worker, 2026-12-07 with the
# installed modules' bytecode written; a fresh clone adds the warm starts' builds): they start first and the short
# unit-test files fill the end, so the two pytest-xdist workers (`--dist loadfile`: a file runs whole on one worker,
# its module fixtures once) finish close together (measured: 1373 s of wall time for 2709 s of tests). Files that
# share a warm start are kept apart (tools: test_demo_tools / test_demo_agent; vision: test_vision_run /
# test_demo_vision; code: test_demo_code / test_two_node_run), so on a fresh clone the second one finds the folder
# built instead of waiting on the first one's build lock (measured: the agent test waited 105 s). Only the order of
# the run depends on this.
SLOWEST_FILES = (
    "tests/test_exp_stop_restart.py",  # 265
    "tests/test_demo_tools.py",  # 113 (+ tools-sft ~100-150 fresh)
    "tests/test_demo.py",  # 161 (+ arith-sft ~90 fresh)
    "tests/test_demo_code.py",  # 186 (+ code-sft ~30-80 fresh)
    "tests/loop/test_vision_run.py",  # 131 (+ vision-sft ~200 fresh)
    "tests/loop/test_two_node_run.py",  # 69
    "tests/test_demo_agent.py",  # 159 (tools-sft, built by test_demo_tools by then)
    "tests/loop/test_fully_async_run.py",  # 105
    "tests/loop/test_trainer_split_placement.py",  # 121
    "tests/test_demo_vision.py",  # 128 (vision-sft, built by test_vision_run by then)
    "tests/test_readme.py",  # 75
    "tests/distributed/test_distributed_ppo_workers.py",  # 89
    "tests/distributed/test_distributed_sp_workers.py",  # 73
    "tests/loop/test_sequence_parallel_run.py",  # 38
    "tests/loop/test_trainer.py",  # 66
    "tests/distributed/test_distributed_vllm_flow.py",  # 5 (54 where it starts the worker's engine)
    "tests/loop/test_trainer_features.py",  # 61
    "tests/test_gpu_check.py",  # 47
    "tests/sft/test_sft_trainer.py",  # 56
    "tests/distributed/test_distributed_lora.py",  # 34
    "tests/loop/test_distill_run.py",  # 44
    "tests/test_demo_distill.py",  # 74 (+ the student and the teacher fresh)
)


def pytest_collection_modifyitems(config, items):
    """Run the slowest files first, then the other files with integration tests, then the rest (each file's own
    order kept); skip GPU-marked tests on machines without CUDA, saying why (never silently)."""
    import torch

    rank: dict[str, tuple[int, int]] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        file_rank = (0, SLOWEST_FILES.index(path)) if path in SLOWEST_FILES else (2, 0)
        if item.get_closest_marker("integration") and file_rank[0] == 2:
            file_rank = (1, 0)
        rank[path] = min(rank.get(path, file_rank), file_rank)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])  # stable: a file's tests keep their order

    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none (run on a GPU host to exercise it)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from reasonrl.models import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray instance for the whole session; on teardown, /dev/shm must hold nothing new."""
    import ray

    from reasonrl.distributed.ray_cluster import init_ray

    shm_before = shm_entries()
    resources = init_ray(num_cpus=8, object_store_memory=512 * 1024**2)
    yield resources
    ray.shutdown()
    leaked = wait_for_own_new_shm(shm_before)
    assert not leaked, f"/dev/shm entries left behind by the test session: {leaked}"


@pytest.fixture(scope="session")
def placement_group(ray_cluster):
    """Three 1-CPU bundles: DeepSpeed rank 0, DeepSpeed rank 1, vLLM engine."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([{"CPU": 1}] * 3, strategy="PACK")
    ray.get(pg.ready(), timeout=60)
    yield pg
    remove_placement_group(pg)


@pytest.fixture(scope="session")
def vllm_engine(placement_group, tiny_model_dir):
    """A vLLM engine actor on the tiny model (fp32, so its logprobs can be compared exactly with transformers)."""
    import ray

    from reasonrl.distributed.vllm_engine import create_vllm_engines

    (engine,) = create_vllm_engines(
        1, str(tiny_model_dir), placement_group=placement_group, bundle_indices=[2], dtype="float32", max_model_len=1024
    )
    ray.get(engine.ready.remote(), timeout=300)
    yield engine
    ray.get(engine.shutdown.remote(), timeout=120)
    ray.kill(engine)


@pytest.fixture(scope="module")
def ds_workers(placement_group, tiny_model_dir):
    """Two DeepSpeed ZeRO-3 ranks (Ray actors in bundles 0 and 1) holding the tiny model, joined over gloo."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from reasonrl.distributed.ds_config import build_ds_config
    from reasonrl.distributed.workers import DeepSpeedLMWorker

    world_size = 2
    actor_cls = ray.remote(DeepSpeedLMWorker)
    workers = [
        actor_cls.options(
            num_cpus=1,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=rank
            ),
        ).remote(rank, world_size)
        for rank in range(world_size)
    ]
    addr, port = ray.get(workers[0].master_address.remote())
    ray.get([w.init_process_group.remote(addr, port, timeout_s=120) for w in workers], timeout=300)
    ds_config = build_ds_config(zero_stage=3, micro_batch_size_per_rank=4, world_size=world_size)
    ray.get([w.setup.remote(str(tiny_model_dir), ds_config) for w in workers], timeout=600)
    yield workers
    for w in workers:
        ray.kill(w)


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B in offline mode with its own files under tmp_path/wandb_settings (runs go to each run's log folder):
    never the network, never the user's settings."""
    pytest.importorskip("wandb", reason="the dev extra installs wandb (pip install 'reasonrl[wandb]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = tmp_path / "wandb_settings"
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(settings / "config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(settings / "cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(settings / "data"))
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return tmp_path


@pytest.fixture
def short_grpo_demo(tmp_path):
    """``run(task, steps, margin, what, **overrides)``: a short GRPO run of ``python -m reasonrl.demo --task <task>``
    (seed 0, held-out eval at step 0 and at the end only; ``overrides``: config fields, e.g. ``lr_warmup_steps``) that
    must raise the held-out ``what`` by ``margin``; returns its ``DemoResult``. The learning tests of the code, tools,
    agent and vision demos."""
    from reasonrl.demo import run_rl

    def run(task: str, steps: int, margin: float, what: str, **overrides):
        logs, ckpt = str(tmp_path / "logs"), str(tmp_path / "ckpt")
        result = run_rl(
            "grpo", task=task, steps=steps, seed=0, log_dir=logs, ckpt_dir=ckpt, eval_interval=steps, **overrides
        )
        print(
            f"{task} grpo: held-out {result.heldout_before:.3f} -> {result.heldout_after:.3f} in "
            f"{result.rl_seconds:.0f} s ({result.mean_step_seconds:.1f} s/step, "
            f"reward {result.mean_reward_seconds:.1f} s/step)"
        )
        assert result.heldout_after >= result.heldout_before + margin, (
            f"{task} GRPO did not learn: held-out {what} {result.heldout_before:.3f} -> {result.heldout_after:.3f} "
            f"after {steps} steps (needs +{margin}); curves in {result.log_dir}"
        )
        return result

    return run

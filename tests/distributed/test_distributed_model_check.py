"""Models on several nodes: what each node's actors load, resolved where they run.

Pure part (milliseconds): which nodes load which model (``node_needs`` over a placement plan's bundle nodes), and
every actor that loads a model (the four DeepSpeed roles, SFT through the policy's setup, the vLLM engine) resolves
the source it is given on its own node (``local_model_folder``) right before loading.

Ray part (integration, one subprocess, ~40-60 s on 2 busy cores, most of it starting the raylets):
``model_nodes_probe.py`` starts a 2-raylet ``ray.cluster_utils.Cluster`` whose nodes have separate HF caches
(``Cluster.add_node(env_vars=...)`` sets each raylet's, hence its workers', ``HF_HUB_CACHE``; the probe's docstring
says why this is the multi-machine case), one node holding the pinned snapshot and the other not. The pre-flight
check names the node lacking it (and only that node); once both have it, each node resolves the pinned id to its
own cache's folder and an actor on the second node loads the model's config from there. A subprocess, because the
test session's own Ray instance (``tests/conftest.py``) and a second cluster cannot share one driver process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from reasonrl.distributed.model_check import node_needs, role_nodes

PROBE = Path(__file__).with_name("model_nodes_probe.py")
REPO = Path(__file__).resolve().parents[2]
SOURCE = "tiny-org/tiny-qwen@0123456789abcdef0123456789abcdef01234567"


def fake_plan():
    """policy on bundles 0, 1 of group g1 (nodes A, B); vllm, tp 2, on bundles 0, 1 of group g2 (both node B)."""
    roles = {
        "policy": SimpleNamespace(group_name="g1", engine_bundle_indices=[[0], [1]]),
        "vllm": SimpleNamespace(group_name="g2", engine_bundle_indices=[[0, 1]]),
    }

    class Plan(dict):
        bundle_nodes = {"g1": {0: "A", 1: "B"}, "g2": {0: "B", 1: "B"}}

    return Plan(roles)


def test_each_node_is_asked_for_the_models_its_actors_load():
    plan = fake_plan()
    assert role_nodes(plan, "policy") == ["A", "B"] and role_nodes(plan, "vllm") == ["B"]
    needs = node_needs(plan, {"policy": SOURCE, "vllm": SOURCE, "critic": "/models/critic"})  # no critic placed
    assert needs == {"A": {SOURCE: ["policy"]}, "B": {SOURCE: ["policy", "vllm"]}}


@pytest.mark.integration
def test_one_local_node_is_not_asked_unless_told(ray_cluster, tmp_path, tiny_model_dir):
    """The session's local Ray instance is one node, the driver's: the check costs nothing there; asked anyway, it
    resolves on that node and reports a folder missing there with the role that needs it."""
    import ray

    from reasonrl.distributed.model_check import ModelsNotOnNodesError, check_models_on_nodes

    here = ray.get_runtime_context().get_node_id()
    role = SimpleNamespace(group_name="g", engine_bundle_indices=[[0]], env_vars=lambda i: {"HF_HUB_OFFLINE": "1"})

    class Plan(dict):
        bundle_nodes = {"g": {0: here}}

    plan, missing = Plan(policy=role, vllm=role), str(tmp_path / "absent")
    assert check_models_on_nodes(plan, {"policy": missing}) == {}
    found = check_models_on_nodes(plan, {"policy": str(tiny_model_dir)}, even_on_one_node=True)
    assert found[here].folders == {str(tiny_model_dir): str(tiny_model_dir)}
    with pytest.raises(ModelsNotOnNodesError) as info:
        check_models_on_nodes(plan, {"policy": missing, "vllm": missing}, even_on_one_node=True)
    (problem,) = info.value.problems
    assert problem.startswith(f"policy, vllm: model folder {missing} does not exist on node ")
    assert f"Ray node {here[:12]}" in problem and "same path on every node" in problem


class Loaded(Exception):
    """Raised by the stand-in loaders: carries the folder the worker was about to load."""


@pytest.mark.parametrize("role", ["PolicyWorker", "ReferenceWorker", "CriticWorker", "RewardModelWorker"])
def test_every_deepspeed_role_loads_from_the_folder_its_node_resolves(role, monkeypatch):
    from reasonrl.distributed import ppo_workers

    def resolve(source):
        assert source == SOURCE  # the worker gets the pinned id, never the driver's folder
        return "/node-local/snapshot"

    def load(path, *args, **kwargs):
        raise Loaded(path)

    monkeypatch.setattr(ppo_workers, "local_model_folder", resolve)
    monkeypatch.setattr(ppo_workers.ds, "load_causal_lm", load)
    monkeypatch.setattr("reasonrl.models.load_critic", load)
    monkeypatch.setattr("transformers.AutoModelForSequenceClassification.from_pretrained", load)
    worker = getattr(ppo_workers, role)(0, 1)
    with pytest.raises(Loaded, match="^/node-local/snapshot$"):
        worker.setup(ppo_workers.WorkerConfig(model_path=SOURCE, zero_stage=0))


def test_the_vllm_engine_loads_from_the_folder_its_node_resolves(monkeypatch):
    import vllm

    from reasonrl.distributed import vllm_engine

    monkeypatch.setattr(vllm_engine, "local_model_folder", lambda source: f"/node-local/{source.split('@')[1]}")

    def llm(**kwargs):
        raise Loaded(kwargs["model"])

    monkeypatch.setattr(vllm, "LLM", llm)
    with pytest.raises(Loaded, match=f"^/node-local/{SOURCE.split('@')[1]}$"):
        vllm_engine.VLLMEngine(SOURCE)


@pytest.mark.integration
def test_two_nodes_with_separate_caches(tmp_path):
    out = tmp_path / "out.json"
    result = subprocess.run(
        [sys.executable, str(PROBE), str(out), str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    probe = json.loads(out.read_text())
    node_a, node_b = probe["nodes"]["node_a"], probe["nodes"]["node_b"]
    assert probe["pinned"] == {"pretrain": SOURCE}
    assert set(probe["role_nodes"].values()) == {node_a, node_b}  # one role on each node
    on_b = next(role for role, node in probe["role_nodes"].items() if node == node_b)

    # before: node B's cache lacks the snapshot; the check names node B, its role, cache and the fix, and not node A
    error = probe["missing_error"]
    assert error.startswith("models missing on some nodes"), error
    (line,) = [x for x in error.splitlines() if x.strip().startswith("- ")]
    assert f"- {on_b}: {SOURCE} is not in the HF cache {probe['cache_b']} of node " in line
    assert f"Ray node {node_b[:12]}" in line and node_a[:12] not in error
    assert "HF_HUB_OFFLINE=1 there forbids downloading it" in line
    assert f"`hf download tiny-org/tiny-qwen --revision {SOURCE.split('@')[1]} --cache-dir {probe['cache_b']}`" in line
    assert "shared cache" in line

    # after: each node resolved the pinned id to the snapshot in its own cache
    found = probe["found"]
    snapshot = f"models--tiny-org--tiny-qwen/snapshots/{SOURCE.split('@')[1]}"
    assert found[node_a]["folders"] == {SOURCE: f"{probe['cache_a']}/{snapshot}"}
    assert found[node_b]["folders"] == {SOURCE: f"{probe['cache_b']}/{snapshot}"}
    assert probe["actor"] == dict(node_id=node_b, folder=f"{probe['cache_b']}/{snapshot}", model_type="qwen2")
    print(
        f"cluster start {probe['cluster_start_s']:.1f} s, check (missing) {probe['missing_check_s']:.1f} s, "
        f"check (present) {probe['present_check_s']:.2f} s, probe total {probe['total_s']:.1f} s"
    )

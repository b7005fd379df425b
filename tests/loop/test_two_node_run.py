"""A training run across two nodes (``two_node_run_probe.py``, its own process: ~3 min on 2 busy cores, most of it
starting two raylets, two runs' actors and a vLLM engine): the code demo's recipe with the policy and the reward
actor on one node and the vLLM engine and the driver on the other, saving each step, then resumed from its checkpoint
on the same cluster; the shared-checkpoint check asked before start-up, passing for a folder both nodes see and
naming the node that does not see one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
PROBE = Path(__file__).with_name("two_node_run_probe.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("two_nodes")
    out = root / "out.json"
    done = subprocess.run(
        [sys.executable, str(PROBE), str(out), str(root / "work")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0 and out.exists(), f"probe failed ({done.returncode}):\n{done.stderr[-4000:]}"
    result = json.loads(out.read_text())
    print({k: round(v, 1) for k, v in result.items() if k.endswith("_s")})
    return result


def test_the_policy_and_the_reward_actor_run_on_another_node_than_the_engine_and_the_driver(probe):
    actors = probe["actors_first"]
    assert set(actors["VLLMEngine"]) == {"A"}  # the driver's node
    assert set(actors["PolicyWorker"]) == {"B"}  # its rank writes checkpoint shards on a node the driver is not on
    assert set(actors["RewardActor"]) == {"B"}  # the sandbox ran away from the driver


def test_the_checkpoints_hold_the_remote_ranks_shards_and_the_run_resumes_from_them(probe):
    assert probe["checkpoints_first"] == ["step_1", "step_2"]
    assert probe["policy_shards_step_2"], "no ZeRO shards from the policy's node in step_2"
    assert probe["checkpoints_after"] == ["step_1", "step_2", "step_3"]
    assert probe["trained_steps"] == [1, 2, 3]  # the resumed run logged step 3 only; 1 and 2 are the first run's
    assert any("resumed from" in line and "step_2" in line for line in probe["train_log_resume"])


def test_the_shared_folder_check_passes_a_shared_folder_and_names_the_node_that_does_not_share_one(probe):
    assert probe["check_policy_node"] == "B"
    assert probe["check_shared"] == {"B": True}
    assert probe["check_left_markers"] == []  # the markers are removed
    error = probe["check_local_error"]
    assert error and "ckpt_dir=" in error and "policy ranks write checkpoints there" in error
    assert "node_local_b" in error  # the path as that node resolved it

"""The shared-checkpoint check's pure parts (milliseconds): which nodes write checkpoints, what a node's probe sees
in a real folder, and the message naming each node that does not share it. On a live two-node cluster:
tests/loop/test_two_node_run.py."""

from __future__ import annotations

from types import SimpleNamespace

from reasonrl.distributed.shared_dirs import _probe_here, shared_dir_problems, writing_nodes


def plan():
    roles = {
        "policy": SimpleNamespace(group_name="g1", engine_bundle_indices=[[0], [1]]),
        "critic": SimpleNamespace(group_name="g1", engine_bundle_indices=[[0], [1]]),
        "ref": SimpleNamespace(group_name="g2", engine_bundle_indices=[[0]]),
        "vllm": SimpleNamespace(group_name="g3", engine_bundle_indices=[[0, 1]]),
    }

    class Plan(dict):
        bundle_nodes = {"g1": {0: "A", 1: "B"}, "g2": {0: "C"}, "g3": {0: "D", 1: "D"}}

    return Plan(roles)


def test_only_the_nodes_of_trainable_ranks_write_checkpoints():
    assert writing_nodes(plan()) == {"A": ["policy", "critic"], "B": ["policy", "critic"]}


def test_a_node_sees_the_drivers_marker_and_writes_its_own(tmp_path):
    (tmp_path / "m").write_text("tok")
    got = _probe_here(str(tmp_path), "m", "tok", "abcdef0123456789")
    assert got["seen"] and got["error"] is None and got["resolved"] == str(tmp_path)
    assert (tmp_path / "m.abcdef012345").read_text() == "tok"


def test_a_node_that_does_not_see_the_marker_writes_nothing(tmp_path):
    got = _probe_here(str(tmp_path / "elsewhere"), "m", "tok", "abcdef0123456789")
    assert not got["seen"] and got["wrote"] is None
    assert not (tmp_path / "elsewhere").exists()


def test_a_stale_marker_with_another_token_is_not_seen(tmp_path):
    (tmp_path / "m").write_text("old run")
    assert not _probe_here(str(tmp_path), "m", "tok", "abcdef0123456789")["seen"]


def test_each_failing_node_is_named_with_the_field_and_what_to_do():
    results = {
        "A" * 16: dict(host="h1", resolved="/ckpt", seen=True, error=None, back=True),
        "B" * 16: dict(host="h2", resolved="/local/ckpt", seen=False, error=None, back=False),
        "C" * 16: dict(host="h3", resolved="/ckpt", seen=True, error="PermissionError: no", back=False),
        "D" * 16: dict(host="h4", resolved="/ckpt", seen=True, error=None, back=False),
    }
    roles = {"B" * 16: ["policy"], "C" * 16: ["critic"], "D" * 16: ["policy"]}
    problems = shared_dir_problems("ckpt_dir", "/ckpt", results, roles)
    assert len(problems) == 3
    assert "node h2" in problems[0] and "does not see the driver's files in ckpt_dir='/ckpt'" in problems[0]
    assert "'/local/ckpt'" in problems[0] and "policy ranks" in problems[0]
    assert "cannot write into ckpt_dir='/ckpt' (PermissionError: no)" in problems[1] and "critic ranks" in problems[1]
    assert "the driver does not see what it wrote" in problems[2]
    assert all("storage every node mounts at the same path" in p for p in problems)

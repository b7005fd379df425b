"""``reasonrl.utils.hub.local_model_folder``: what an actor loads, looked up in its own process's HF cache (a real
Hub cache layout in tmp_path built from the tiny model; no network is ever used)."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest

from reasonrl.utils.hub import (
    ModelNotOnNodeError,
    download_command,
    is_commit,
    local_model_folder,
    node_name,
    snapshot_commit,
)

REPO = "tiny-org/tiny-qwen"
SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture
def cache(tmp_path, monkeypatch, tiny_model_dir) -> Path:
    """HF_HUB_CACHE=tmp_path/hub holding REPO at SHA (= main), HF_HUB_OFFLINE=1, no network."""
    repo = tmp_path / "hub" / f"models--{REPO.replace('/', '--')}"
    shutil.copytree(tiny_model_dir, repo / "snapshots" / SHA)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tmp_path / "hub"


def test_commits_and_snapshot_folders():
    assert is_commit(SHA) and not is_commit("main") and not is_commit(SHA[:7]) and not is_commit(None)
    assert snapshot_commit(f"/cache/models--a--b/snapshots/{SHA}") == SHA
    assert snapshot_commit("/models/Qwen2.5-7B") is None
    assert download_command(REPO, SHA, "/c") == f"hf download {REPO} --revision {SHA} --cache-dir /c"


def test_a_pinned_hub_id_is_its_snapshot_in_this_cache(cache):
    folder = cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / SHA
    assert local_model_folder(f"{REPO}@{SHA}") == str(folder)
    assert local_model_folder(REPO) == str(folder)  # unpinned: main, as this cache knows it


def test_a_local_folder_is_returned_when_it_exists(tiny_model_dir):
    assert local_model_folder(str(tiny_model_dir)) == str(tiny_model_dir)


def test_a_commit_missing_here_names_node_model_commit_cache_and_the_fix(cache):
    with pytest.raises(ModelNotOnNodeError) as info:
        local_model_folder(f"{REPO}@{OTHER}")
    message = str(info.value)
    assert f"{REPO}@{OTHER} is not in the HF cache {cache} of node {node_name()}" in message
    assert "HF_HUB_OFFLINE=1 there forbids downloading it" in message
    assert f"`hf download {REPO} --revision {OTHER} --cache-dir {cache}` on that node" in message
    assert "HF_HOME (or HF_HUB_CACHE) pointing at a file system all nodes mount" in message
    with pytest.raises(ModelNotOnNodeError, match=r"of node 10\.0\.0\.2 \(host gpu-2\)"):
        local_model_folder(f"{REPO}@{OTHER}", where="node 10.0.0.2 (host gpu-2)")


def test_online_a_missing_commit_is_downloaded_and_a_failure_reported(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(ModelNotOnNodeError, match=r"downloading it there failed \(.*\): download it into that cache"):
        local_model_folder(f"{REPO}@{OTHER}")  # the download is tried (and fails: no network in tests)


def test_a_missing_local_folder_says_it_must_exist_on_every_node(tmp_path):
    with pytest.raises(ModelNotOnNodeError, match=r"does not exist on node .*same path on every node.*Hub id"):
        local_model_folder(str(tmp_path / "models" / "absent-model"))

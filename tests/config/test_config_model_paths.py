"""Model fields as local folders (``reasonrl.config.model_paths``): a real Hugging Face Hub cache layout built in
tmp_path from the tiny model (``models--owner--name/snapshots/<sha>/`` + ``refs/main``), read through
``huggingface_hub`` with ``HF_HUB_OFFLINE=1``; no network is used."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.model_paths import (
    hub_cache_dir,
    model_max_positions,
    model_problems,
    resolve_model_path,
    split_hub_id,
)
from reasonrl.sft import SFTConfig

REPO = "tiny-org/tiny-qwen"
SHA = "0123456789abcdef0123456789abcdef01234567"
OLD_SHA = "fedcba9876543210fedcba9876543210fedcba98"


def hub_cache(root: Path, model: Path) -> Path:
    """A Hub cache under ``root/hub`` holding ``REPO`` at two commits (``main`` -> ``SHA``, tag ``v0`` ->
    ``OLD_SHA``), each snapshot a copy of ``model``; returns the snapshot of ``main``."""
    repo = root / "hub" / f"models--{REPO.replace('/', '--')}"
    for sha, ref in ((SHA, "main"), (OLD_SHA, "v0")):
        shutil.copytree(model, repo / "snapshots" / sha)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(sha)
    return repo / "snapshots" / SHA


@pytest.fixture
def offline_hub(tmp_path, monkeypatch, tiny_model_dir) -> Path:
    """HF_HOME=tmp_path (so the cache is tmp_path/hub), HF_HUB_OFFLINE=1; returns main's snapshot folder."""
    snapshot = hub_cache(tmp_path, tiny_model_dir)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return snapshot


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network connection attempted: {args[1:]}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_cache_folder_follows_the_environment_at_call_time(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_cache_dir() == tmp_path / "cache"


def test_hub_ids_and_revisions_are_parsed():
    assert split_hub_id("Qwen/Qwen2.5-0.5B") == ("Qwen/Qwen2.5-0.5B", None)
    assert split_hub_id("Qwen/Qwen2.5-0.5B@main") == ("Qwen/Qwen2.5-0.5B", "main")
    assert split_hub_id(f"{REPO}@{SHA}") == (REPO, SHA)
    for not_an_id in ("tiny", "/abs/model", "a/b/c", "Qwen/Qwen2.5-0.5B@", "~/models"):
        assert split_hub_id(not_an_id) is None, not_an_id


def test_hub_id_resolves_to_its_cached_snapshot_at_any_revision(offline_hub, no_network):
    assert resolve_model_path(REPO) == str(offline_hub)
    assert BasePPOExpConfig.resolve_model_path(f"{REPO}@main") == str(offline_hub)
    assert resolve_model_path(f"{REPO}@{SHA}") == str(offline_hub)
    assert resolve_model_path(f"{REPO}@v0") == str(offline_hub.parent / OLD_SHA)
    assert resolve_model_path(f"{REPO}@{OLD_SHA}") == str(offline_hub.parent / OLD_SHA)
    assert model_problems("pretrain", f"{REPO}@{SHA}") == []
    assert model_max_positions(REPO) == json.loads((offline_hub / "config.json").read_text())["max_position_embeddings"]


def test_resolved_snapshot_is_a_real_model(offline_hub):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(f"{REPO}@main")
    model = AutoModelForCausalLM.from_pretrained(path)
    tokens = AutoTokenizer.from_pretrained(path)("1+1=", return_tensors="pt")
    with torch.no_grad():
        logits = model(**tokens).logits
    assert logits.shape == (1, tokens["input_ids"].shape[1], model.config.vocab_size)


def test_missing_hub_id_names_the_id_the_cache_and_the_download(offline_hub, no_network):
    with pytest.raises(ConfigError) as info:
        resolve_model_path("Qwen/Qwen2.5-7B")
    message = str(info.value)
    assert "'Qwen/Qwen2.5-7B' is not in the local HF cache" in message
    assert str(offline_hub.parents[2]) in message  # the cache folder: HF_HOME/hub
    assert "hf download Qwen/Qwen2.5-7B --local-dir models/Qwen2.5-7B" in message
    assert "pretrain=./models/Qwen2.5-7B" in message
    with pytest.raises(ConfigError, match="not in the local HF cache"):
        resolve_model_path(f"{REPO}@v9")  # a revision the cache does not have


def test_offline_validation_refuses_an_uncached_hub_id(offline_hub, no_network):
    (problem,) = model_problems("critic_pretrain", "Qwen/Qwen2.5-7B")
    assert problem.startswith("critic_pretrain='Qwen/Qwen2.5-7B' does not exist locally")
    assert "HF_HUB_OFFLINE=1" in problem and "hf download Qwen/Qwen2.5-7B" in problem
    assert "huggingface-cli" not in problem  # the pinned huggingface_hub ships `hf`
    with pytest.raises(ConfigError, match=r"pretrain='Qwen/Qwen2.5-7B' does not exist locally.*hf download"):
        SFTConfig(pretrain="Qwen/Qwen2.5-7B").validate()  # SFT validates models with the same function


def test_online_validation_accepts_an_uncached_hub_id_without_downloading(offline_hub, monkeypatch, no_network):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert model_problems("pretrain", "Qwen/Qwen2.5-7B") == []  # resolve_model_path downloads it later
    assert model_max_positions("Qwen/Qwen2.5-7B") is None  # unknown until downloaded: no length check
    BasePPOExpConfig(pretrain="Qwen/Qwen2.5-7B", device="cpu", generate_max_len=512).validate()
    assert sorted(p.name for p in hub_cache_dir().iterdir()) == [f"models--{REPO.replace('/', '--')}"]


def test_an_existing_local_folder_wins_over_a_hub_id(offline_hub, tmp_path, monkeypatch, tiny_model_dir, no_network):
    work = tmp_path / "work"
    shutil.copytree(tiny_model_dir, work / REPO)  # ./tiny-org/tiny-qwen: same spelling as the Hub id
    monkeypatch.chdir(work)
    assert resolve_model_path(REPO) == REPO
    assert model_problems("pretrain", REPO) == []
    assert resolve_model_path(f"./{REPO}") == f"{REPO}"  # Path() drops the ./


def test_a_missing_local_path_is_not_taken_for_a_hub_id(offline_hub, no_network):
    (problem,) = model_problems("pretrain", "./models/Qwen2.5-7B")
    assert "does not exist (no such folder; current directory:" in problem
    assert resolve_model_path("/no/such/model") == "/no/such/model"  # loading it names the problem


def test_online_download_failure_is_a_config_error_with_the_advice(offline_hub, monkeypatch):
    """Online (HF_HUB_OFFLINE=0) on a machine whose connections all fail: the download is tried and its failure
    reported with the way to provide the model (a repo that does not exist, so that no test ever downloads)."""

    def unreachable(*args, **kwargs):
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(socket.socket, "connect", unreachable)
    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(ConfigError, match=r"reasonrl-tests/no-such-model.*hf download reasonrl-tests/no-such-model"):
        resolve_model_path("reasonrl-tests/no-such-model")

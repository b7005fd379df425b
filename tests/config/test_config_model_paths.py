"""Model fields as local folders (``reasonrl.config.model_paths``): a real Hugging Face Hub cache layout built in
tmp_path from the tiny model (``models--owner--name/snapshots/<sha>/`` + ``refs/main``), read through
``huggingface_hub`` with ``HF_HUB_OFFLINE=1``; no network is used. Then the pins: Hub ids resolved to commits at the
start, recorded in the saved config, and kept by a resume after ``main`` moved on."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError, model_paths
from reasonrl.config.model_paths import (
    PINNED_FROM,
    adopt_saved_pins,
    hub_cache_dir,
    model_max_positions,
    model_problems,
    model_source,
    pinned_model,
    resolve_model_path,
    split_hub_id,
)
from reasonrl.config.resume import resume_changes
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


# ------------------------------------------------------------------------------------------ pinning and resume
NEW_SHA = "aaaabbbbccccddddeeeeffff0000111122223333"


def move_main(snapshot: Path, sha: str) -> Path:
    """The Hub moved ``main`` on: a new commit ``sha`` in the cache of ``snapshot`` and refs/main pointing at it."""
    shutil.copytree(snapshot, snapshot.parent / sha)
    (snapshot.parents[1] / "refs" / "main").write_text(sha)
    return snapshot.parent / sha


def test_hub_ids_are_pinned_to_the_commit_they_resolve_to(offline_hub, tiny_model_dir, no_network, tmp_path):
    assert pinned_model(REPO) == f"{REPO}@{SHA}"
    assert pinned_model(f"{REPO}@main") == f"{REPO}@{SHA}"
    assert pinned_model(f"{REPO}@v0") == f"{REPO}@{OLD_SHA}"  # a tag moves too
    assert pinned_model(f"{REPO}@{OLD_SHA}") == f"{REPO}@{OLD_SHA}"  # a commit is kept
    assert pinned_model("tiny") == "tiny" and pinned_model(None) is None
    assert pinned_model(str(tiny_model_dir)) == str(tiny_model_dir)
    # what the actors get: the pinned id (resolved on each node), or an absolute local folder
    assert model_source(REPO) == f"{REPO}@{SHA}"
    assert BasePPOExpConfig.model_source(f"{REPO}@v0") == f"{REPO}@{OLD_SHA}"
    (tmp_path / "work").mkdir()
    shutil.copytree(tiny_model_dir, tmp_path / "work" / "models" / "m")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path / "work")
        assert model_source("./models/m") == str(tmp_path / "work" / "models" / "m")


def test_a_run_pins_its_model_fields_and_its_saved_config_records_them(offline_hub, no_network, tmp_path):
    from reasonrl.run.role_settings import worker_config

    cfg = BasePPOExpConfig(pretrain=REPO, critic_pretrain=f"{REPO}@v0", device="cpu")
    assert cfg.pin_models() == {"pretrain": f"{REPO}@{SHA}", "critic_pretrain": f"{REPO}@{OLD_SHA}"}
    assert (cfg.pretrain, cfg.critic_pretrain, cfg.reward_pretrain) == (f"{REPO}@{SHA}", f"{REPO}@{OLD_SHA}", None)
    assert cfg.pin_models() == {}  # pinned once
    assert worker_config(cfg, "policy", num_rollout_steps=1).model_path == f"{REPO}@{SHA}"  # not the driver's folder
    assert worker_config(cfg, "critic", num_rollout_steps=1).model_path == f"{REPO}@{OLD_SHA}"
    saved = json.loads(cfg.save_json(tmp_path / "config.json").read_text())
    assert saved["pretrain"] == f"{REPO}@{SHA}"
    assert saved[PINNED_FROM] == {"pretrain": REPO, "critic_pretrain": f"{REPO}@v0"}
    assert BasePPOExpConfig.from_json(tmp_path / "config.json").pretrain == f"{REPO}@{SHA}"


def checkpoint(root: Path, cfg) -> Path:
    """A complete checkpoint ``step_1`` of ``cfg`` (its config.json and a trainer state) under ``root``."""
    from reasonrl.utils.checkpoint import CheckpointManager

    manager = CheckpointManager(root / cfg.exp_name, keep_last=2)
    with manager.staging(1) as staging:
        (staging / "trainer_state.json").write_text('{"global_step": 1}')
        cfg.save_json(staging / "config.json")
    return manager.path_for(1)


def test_resume_loads_the_commit_its_checkpoint_pinned_not_todays_main(offline_hub, no_network, tmp_path):
    """Issue 23 item 4: ``pretrain=owner/name`` is pinned at the start; after ``main`` moved on, resuming with the
    same ``pretrain=owner/name`` loads the checkpoint's commit, and a fresh run the new ``main``."""
    from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
    from reasonrl.exp import BasePPOExp
    from reasonrl.run.lifecycle import ExperimentRunner
    from reasonrl.run.role_settings import worker_config

    def config(**kw):
        return TinyGRPOCPUConfig(pretrain=REPO, ckpt_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "l"), **kw)

    first = config()
    first.pin_models()
    checkpoint(tmp_path / "ckpt", first)
    newer = move_main(offline_hub, NEW_SHA)
    resumed = ExperimentRunner(BasePPOExp(config(resume="auto")))
    assert resumed.resume_checkpoint() is not None  # the comparison passed: owner/name matches its pin
    assert resumed.cfg.pretrain == f"{REPO}@{SHA}" and resumed.cfg.pin_models() == {}
    assert worker_config(resumed.cfg, "ref").model_path == f"{REPO}@{SHA}"
    assert resolve_model_path(resumed.cfg.pretrain) == str(offline_hub)
    fresh = config(resume="none")
    model_paths._DOWNLOADED.clear()  # a new process: main resolves afresh
    assert fresh.pin_models() == {"pretrain": f"{REPO}@{NEW_SHA}"} and resolve_model_path(fresh.pretrain) == str(newer)


def test_resume_with_another_revision_is_refused_and_an_old_checkpoint_adopts_its_pin(offline_hub, no_network):
    cfg = BasePPOExpConfig(pretrain=REPO, device="cpu")
    saved = {"pretrain": f"{REPO}@{SHA}", PINNED_FROM: {"pretrain": REPO}}
    other = BasePPOExpConfig(pretrain=f"{REPO}@v0", device="cpu")
    assert adopt_saved_pins(other, saved) == {} and other.pretrain == f"{REPO}@v0"  # not what that run was given
    (change,) = resume_changes(saved | {"device": "cpu"}, other)  # so the comparison refuses it
    assert change.describe() == f"pretrain: checkpoint '{REPO}@{SHA}', this run '{REPO}@v0'"
    assert adopt_saved_pins(cfg, saved) == {"pretrain": f"{REPO}@{SHA}"}
    old = BasePPOExpConfig(pretrain=REPO, device="cpu")  # a config saved before records existed: owner/name only
    assert adopt_saved_pins(old, {"pretrain": f"{REPO}@{SHA}"}) == {"pretrain": f"{REPO}@{SHA}"}
    elsewhere = BasePPOExpConfig(pretrain="other-org/model", device="cpu")
    assert adopt_saved_pins(elsewhere, {"pretrain": f"{REPO}@{SHA}"}) == {}  # another model: never adopted


def test_sft_pins_pretrain_and_resumes_at_the_checkpoint_commit(offline_hub, no_network, tmp_path):
    from reasonrl.sft.trainer import SFT_CONFIG_FILE, pin_pretrain

    assert pin_pretrain(fresh := SFTConfig(pretrain=REPO), None) == {"pretrain": f"{REPO}@{SHA}"}
    assert fresh.pretrain == f"{REPO}@{SHA}"
    ckpt = tmp_path / "step_1"
    ckpt.mkdir()
    (ckpt / SFT_CONFIG_FILE).write_text(json.dumps({"pretrain": f"{REPO}@{OLD_SHA}", PINNED_FROM: {"pretrain": REPO}}))
    resumed = SFTConfig(pretrain=REPO)
    assert pin_pretrain(resumed, ckpt) == {"pretrain": f"{REPO}@{OLD_SHA}"} and resumed.pretrain.endswith(OLD_SHA)


def test_the_memory_model_knows_a_pinned_qwen():
    from reasonrl.config.memory import setup_from_config
    from reasonrl.planning.memory_model import QWEN25

    cfg = BasePPOExpConfig(pretrain=f"Qwen/Qwen2.5-7B@{SHA}", device="cpu")
    assert setup_from_config(cfg).model == QWEN25["Qwen/Qwen2.5-7B"]

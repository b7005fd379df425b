"""The cached SFT warm start (``pretrain=arith-sft``): its cache key, reuse of a cached folder, and the registry of
offline model names. (Building it for real is exercised by tests/test_demo.py.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from reasonrl.config import OFFLINE_MODELS, offline_model_path, registered_offline_models
from reasonrl.sft.warm_start import ArithWarmStartConfig, register_offline_models, warm_start_key, warm_start_path


def test_key_depends_on_what_changes_the_weights_only():
    base = ArithWarmStartConfig()
    key = warm_start_key(base)
    assert key == warm_start_key(ArithWarmStartConfig()) and key.startswith("sft-arith_sft-")
    for cosmetic in (dict(log_dir="elsewhere"), dict(output_dir="x"), dict(eval_interval=7), dict(progress_bar=False)):
        assert warm_start_key(dataclasses.replace(base, **cosmetic)) == key, cosmetic
    for real in (
        dict(lr=5e-4),
        dict(seed=1),
        dict(max_steps=401),
        dict(train_data=["gsm8k_train"]),
        dict(zero_stage=3),
    ):
        assert warm_start_key(dataclasses.replace(base, **real)) != key, real


def test_key_follows_the_base_model_build_and_refuses_in_memory_data(monkeypatch):
    from reasonrl.models import tiny

    key = warm_start_key(ArithWarmStartConfig())
    monkeypatch.setattr(tiny, "BUILD_VERSION", tiny.BUILD_VERSION + 1)
    assert warm_start_key(ArithWarmStartConfig()) != key, "a rebuilt base model must not reuse the old warm start"
    with pytest.raises(ValueError, match="needs named data"):
        warm_start_key(ArithWarmStartConfig(rows=[{"question": "1+1=", "answer": "2"}]))


def test_a_cached_folder_is_reused_without_training(tmp_path, monkeypatch):
    import reasonrl.sft.trainer

    cfg = ArithWarmStartConfig()
    cached = tmp_path / warm_start_key(cfg)
    cached.mkdir()
    (cached / "model.safetensors").write_bytes(b"weights")

    def no_training(*args, **kwargs):
        raise AssertionError("a cached warm start must not be trained again")

    monkeypatch.setattr(reasonrl.sft.trainer, "train_sft", no_training)
    assert warm_start_path(cfg, cache_dir=tmp_path) == cached
    with pytest.raises(AssertionError, match="must not be trained"):
        warm_start_path(dataclasses.replace(cfg, seed=5), cache_dir=tmp_path)  # another recipe: would train


def test_two_processes_asking_at_once_train_it_once(tmp_path, monkeypatch):
    """Two builders at the same time (two test workers, two runs started together): the second waits on the lock
    and finds the first one's folder. Threads stand in for processes: each opens the lock file itself."""
    import threading
    import time

    import reasonrl.sft.trainer

    trained = []

    def slow_training(cfg):
        trained.append(cfg.output_dir)
        time.sleep(0.3)
        Path(cfg.output_dir).mkdir(parents=True)
        (Path(cfg.output_dir) / "model.safetensors").write_bytes(b"weights")

    monkeypatch.setattr(reasonrl.sft.trainer, "train_sft", slow_training)
    cfg = ArithWarmStartConfig()
    paths = []
    builders = [threading.Thread(target=lambda: paths.append(warm_start_path(cfg, cache_dir=tmp_path))) for _ in "ab"]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join(timeout=30)
    assert len(trained) == 1, trained
    assert paths == [tmp_path / warm_start_key(cfg)] * 2 and (paths[0] / "model.safetensors").is_file()


def test_the_warm_start_recipe_is_a_valid_sft_config(tmp_path):
    ArithWarmStartConfig(output_dir=str(tmp_path / "out"), log_dir=str(tmp_path / "logs")).validate()
    from playground.sft_arith import SFTArithConfig

    assert SFTArithConfig().weights_fingerprint() == ArithWarmStartConfig().weights_fingerprint(), (
        "the playground recipe trains exactly the warm start"
    )


def test_offline_names_resolve_and_unknown_names_are_refused(tiny_model_dir):
    register_offline_models()  # what the runners call (tests/conftest.py did already: a no-op)
    assert offline_model_path("tiny") == tiny_model_dir  # reasonrl.models.named's builder
    assert set(registered_offline_models()) == set(OFFLINE_MODELS)  # arith-sft & co.: the warm starts'
    with pytest.raises(KeyError, match="unknown offline model 'tiny2'; available: tiny, tiny-demo"):
        offline_model_path("tiny2")


def test_the_tool_warm_starts_share_model_and_schedule_and_differ_in_data(tmp_path):
    from reasonrl.sft.warm_start import ToolsNoToolWarmStartConfig, ToolsWarmStartConfig

    tools, notool = ToolsWarmStartConfig(), ToolsNoToolWarmStartConfig()
    for cfg in (tools, notool):
        dataclasses.replace(cfg, output_dir=str(tmp_path / cfg.exp_name), log_dir=str(tmp_path / "logs")).validate()
        assert cfg.response_field == "messages" and cfg.prompt_template == "chat"
    same = ("pretrain", "max_steps", "train_batch_size", "lr", "lr_schedule", "seed")
    assert all(getattr(tools, f) == getattr(notool, f) for f in same)
    assert tools.train_data == ["tool_mul_sft_train"] and notool.train_data == ["tool_mul_notool_sft_train"]
    assert warm_start_key(tools) != warm_start_key(notool) and warm_start_key(tools).startswith("sft-tools_sft-")
    assert {"tools-sft", "tools-sft-notool"} <= set(registered_offline_models())


def test_the_distillation_warm_starts_are_arith_sft_stopped_early_and_continued(tmp_path, monkeypatch):
    """``arith-sft-student`` is the ``arith-sft`` run stopped early (the same run, a lower accuracy band);
    ``arith-sft-teacher`` continues ``arith-sft`` (its cache key includes the base's, so a changed ``arith-sft`` recipe
    builds a new teacher)."""
    import reasonrl.sft.warm_start as ws

    base, student, teacher = ArithWarmStartConfig(), ws.ArithStudentWarmStartConfig(), ws.ArithTeacherWarmStartConfig()
    for cfg in (student, teacher):
        dataclasses.replace(cfg, output_dir=str(tmp_path / cfg.exp_name), log_dir=str(tmp_path / "logs")).validate()
    same_run = dict(max_steps=base.max_steps, band_low=base.band_low, band_high=base.band_high)
    assert dataclasses.replace(student, **same_run).weights_fingerprint() == base.weights_fingerprint()
    assert student.band_high <= base.band_low, "the student stops in a band below arith-sft's"
    assert teacher.pretrain == "arith-sft" and teacher.train_data == base.train_data and teacher.lr_schedule == "cosine"
    assert {"arith-sft-student", "arith-sft-teacher"} <= set(registered_offline_models())

    key = warm_start_key(teacher)
    assert key.startswith("sft-arith_sft_teacher-") and warm_start_key(student).startswith("sft-arith_sft_student-")
    monkeypatch.setitem(ws.WARM_START_CONFIGS, "arith-sft", lambda: dataclasses.replace(base, max_steps=401))
    assert warm_start_key(teacher) != key, "a changed arith-sft must not reuse the teacher"

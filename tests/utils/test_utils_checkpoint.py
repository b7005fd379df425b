"""Checkpoint directories: atomic commit with marker and manifest, failures leave nothing, retention, resume."""

import json
import math

import pytest

from reasonrl.utils.checkpoint import (
    COMPLETE_MARKER,
    META_FILE,
    CheckpointError,
    CheckpointManager,
    check_complete,
    config_hash,
    is_complete,
    load_trainer_state,
    read_meta,
    save_trainer_state,
    step_of,
)


def write_payload(folder, step):
    (folder / "policy").mkdir()
    (folder / "policy" / "model_states.pt").write_bytes(b"x" * (100 + step))
    (folder / "note.txt").write_text(f"step {step}")


def save(manager, step, **meta):
    with manager.staging(step, meta) as tmp:
        write_payload(tmp, step)
    return manager.path_for(step)


def test_staging_commit_writes_marker_meta_and_manifest(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt" / "exp", keep_last=3)
    path = save(manager, 10, config_hash="abc")
    assert path.name == "step_10" and is_complete(path)
    meta = read_meta(path)
    assert meta["step"] == 10 and meta["config_hash"] == "abc" and meta["time"] > 0
    assert meta["files"] == {"note.txt": 7, "policy/model_states.pt": 110}
    assert json.loads((path / COMPLETE_MARKER).read_text()) == {"step": 10}
    assert sorted(p.name for p in manager.root.iterdir()) == ["step_10"]  # no staging left over
    assert manager.latest() == path


def test_failure_inside_staging_removes_temp_and_keeps_existing(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    good = save(manager, 1)
    with pytest.raises(RuntimeError, match="boom"):
        with manager.staging(2) as tmp:
            write_payload(tmp, 2)
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1"]
    assert manager.latest() == good and is_complete(good)


def test_begin_commit_abort_for_collective_saves(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    staging = manager.begin(5)
    assert staging.is_dir() and staging.parent == tmp_path and staging.name.startswith(".step_5.tmp-")
    assert manager.latest() is None  # a staging dir is never a checkpoint
    write_payload(staging, 5)  # "actors" write here
    final = manager.commit(5, staging, {"world_size": 2})
    assert final == tmp_path / "step_5" and not staging.exists()
    assert read_meta(final)["world_size"] == 2

    aborted = manager.begin(6)
    write_payload(aborted, 6)
    manager.abort(aborted)
    assert not aborted.exists() and manager.latest() == final
    manager.abort(aborted)  # idempotent
    with pytest.raises(CheckpointError):
        manager.commit(7, tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="reserved"):
        manager.commit(7, manager.begin(7), {"step": 3})


def test_refuses_to_overwrite_a_complete_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    save(manager, 3)
    with pytest.raises(CheckpointError, match="already exists"):
        manager.begin(3)


def test_overwrite_replaces_atomically(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0, overwrite=True)
    save(manager, 3)
    with manager.staging(3, {"tag": "second"}) as tmp:
        (tmp / "only.txt").write_text("new")
    path = manager.path_for(3)
    assert is_complete(path) and read_meta(path)["tag"] == "second"
    assert not (path / "note.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_3"]


def test_incomplete_and_damaged_checkpoints_are_ignored(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    good = save(manager, 1)
    newer = save(manager, 2)
    (tmp_path / "step_9").mkdir()  # e.g. a half-copied directory: no marker
    write_payload(tmp_path / "step_9", 9)
    assert "COMPLETE" in check_complete(tmp_path / "step_9")
    assert manager.latest() == newer
    (newer / "policy" / "model_states.pt").write_bytes(b"short")  # damaged after the fact
    assert "bytes" in check_complete(newer)
    assert manager.latest() == good  # falls back with a warning
    (good / "note.txt").unlink()
    assert "missing file note.txt" in check_complete(good)
    assert manager.latest() is None


def test_marker_must_match_the_directory_name(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    path = save(manager, 4)
    path.rename(tmp_path / "step_40")
    assert "name says 40" in check_complete(tmp_path / "step_40")
    assert manager.latest() is None


def test_prune_keeps_last_k_and_removes_stale_staging(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=2)
    stale = manager.begin(1)  # a crashed save of an old step
    for step in (1, 2, 3):
        save(manager, step)
    in_progress = manager.begin(7)  # a save newer than the newest complete one may still be running
    save(manager, 4)  # commit prunes
    assert [p.name for p in manager.list_complete()] == ["step_3", "step_4"]
    assert not stale.exists() and in_progress.exists()
    assert step_of(manager.latest()) == 4


def test_prune_never_deletes_the_checkpoint_just_written(tmp_path):
    # resumed from an old step while newer checkpoints of an abandoned run still exist
    manager = CheckpointManager(tmp_path, keep_last=1)
    for step in (10, 20):
        save(manager, step)
    written = save(manager, 11)
    assert written.exists() and (tmp_path / "step_20").exists()


def test_keep_last_zero_keeps_everything(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    for step in range(5):
        save(manager, step)
    assert len(manager.list_complete()) == 5


def test_resolve_resume(tmp_path):
    manager = CheckpointManager(tmp_path / "exp", keep_last=0)
    assert manager.resolve_resume("auto") is None  # root does not even exist yet
    assert manager.resolve_resume("none") is None
    assert manager.resolve_resume(None) is None
    first = save(manager, 1)
    second = save(manager, 2)
    assert manager.resolve_resume("auto") == second
    assert manager.resolve_resume(str(first)) == first
    assert manager.resolve_resume("step_1") == first  # relative to the root
    missing = tmp_path / "nowhere" / "step_3"
    with pytest.raises(CheckpointError, match=str(missing)):
        manager.resolve_resume(str(missing))
    staging = manager.begin(3)
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        manager.resolve_resume(str(staging))
    (second / COMPLETE_MARKER).unlink()
    with pytest.raises(CheckpointError, match="COMPLETE"):
        manager.resolve_resume(str(second))
    assert manager.resolve_resume("auto") == first


def test_trainer_state_round_trip_is_exact_json(tmp_path):
    state = {
        "global_step": 12,
        "episode": 1,
        "data": {"epoch": 0, "position": 96, "order_seed": 1234},
        "kl_controller": {"value": 0.0012345678901234567, "history": [0.1, 1e-300]},
        "best": math.inf,
        "note": "ünïcode",
        "flag": True,
        "nothing": None,
    }
    path = save_trainer_state(tmp_path, state)
    assert path.name == "trainer_state.json"
    assert load_trainer_state(tmp_path) == state
    with pytest.raises(TypeError, match=r"state\['data'\]\['pair'\] is tuple"):
        save_trainer_state(tmp_path, {"data": {"pair": (1, 2)}})
    with pytest.raises(TypeError, match="keys must be str"):
        save_trainer_state(tmp_path, {1: 2})
    with pytest.raises(CheckpointError):
        load_trainer_state(tmp_path / "missing")


def test_trainer_state_inside_a_checkpoint_is_in_the_manifest(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    with manager.staging(8) as tmp:
        save_trainer_state(tmp, {"global_step": 8})
    path = manager.latest()
    assert "trainer_state.json" in read_meta(path)["files"]
    assert load_trainer_state(path) == {"global_step": 8}
    assert META_FILE not in read_meta(path)["files"]


def test_config_hash_is_stable():
    import dataclasses

    @dataclasses.dataclass
    class Cfg:
        lr: float = 1e-6
        name: str = "x"

    assert config_hash(Cfg()) == config_hash({"name": "x", "lr": 1e-6})
    assert config_hash(Cfg(lr=2e-6)) != config_hash(Cfg())

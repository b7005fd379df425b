"""Checkpoint directories: atomic commit with marker and checksummed manifest, failures leave nothing, retention,
one history, resume that moves damaged checkpoints aside and never silently starts over."""

import hashlib
import json
import math

import pytest
from loguru import logger

from reasonrl.utils.checkpoint import (
    COMPLETE_MARKER,
    META_FILE,
    CheckpointError,
    CheckpointManager,
    NoCompleteCheckpointError,
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


def crash_leftover(root, step, kind="tmp"):
    """What a save killed mid-write leaves: a staging folder of an earlier process (not one this process writes)."""
    folder = root / f".step_{step}.{kind}-crashed"
    folder.mkdir(parents=True)
    write_payload(folder, step)
    return folder


def names(folder):
    return sorted(p.name.split("-")[0] for p in folder.iterdir())  # "step_2.damaged-<time>" -> "step_2.damaged"


@pytest.fixture
def warnings():
    messages = []
    sink = logger.add(lambda m: messages.append(str(m)), level="INFO")
    yield messages
    logger.remove(sink)


def test_staging_commit_writes_marker_meta_and_manifest(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt" / "exp", keep_last=3)
    path = save(manager, 10, config_hash="abc")
    assert path.name == "step_10" and is_complete(path)
    meta = read_meta(path)
    assert meta["step"] == 10 and meta["config_hash"] == "abc" and meta["time"] > 0
    sha = {"note.txt": b"step 10", "policy/model_states.pt": b"x" * 110}
    sha = {rel: hashlib.sha256(data).hexdigest() for rel, data in sha.items()}
    assert meta["format"] == 2
    assert meta["files"] == {
        "note.txt": {"size": 7, "sha256": sha["note.txt"]},
        "policy/model_states.pt": {"size": 110, "sha256": sha["policy/model_states.pt"]},
    }
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


def test_saving_a_step_again_moves_the_old_one_and_newer_ones_aside(tmp_path):
    # e.g. a run resumed from step_3 of a folder that also holds steps 3-5 of another continuation
    manager = CheckpointManager(tmp_path, keep_last=0)
    for step in (3, 4, 5):
        save(manager, step, tag="old")
    staging = manager.begin(3)  # no longer refused: the collision is resolved at commit, nothing is lost
    (staging / "new.txt").write_text("new")
    manager.commit(3, staging, {"tag": "new"})
    assert read_meta(manager.path_for(3))["tag"] == "new" and [p.name for p in manager.step_dirs()] == ["step_3"]
    assert names(tmp_path) == ["step_3", "step_3.superseded", "step_4.superseded", "step_5.superseded"]
    old = next(tmp_path.glob("step_3.superseded-*"))
    assert (old / "note.txt").read_text() == "step 3" and read_meta(old)["tag"] == "old"
    assert manager.resolve_resume("auto") == manager.path_for(3)


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
    crashed = crash_leftover(tmp_path, 9)  # newer than any checkpoint: the old rule kept it
    manager = CheckpointManager(tmp_path, keep_last=2)
    for step in (1, 2, 3):
        save(manager, step)
    assert not crashed.exists()
    in_progress = manager.begin(7)  # a save this process is still writing is never cleaned up
    save(manager, 4)  # commit prunes
    assert [p.name for p in manager.list_complete()] == ["step_3", "step_4"]
    assert in_progress.exists()
    assert step_of(manager.latest()) == 4


def test_prune_never_deletes_the_checkpoint_just_written(tmp_path):
    # resumed from an old step while newer checkpoints of an abandoned continuation still exist
    manager = CheckpointManager(tmp_path, keep_last=1)
    for step in (10, 20):
        save(manager, step)
    written = save(manager, 11)
    assert written.exists() and manager.latest() == written
    assert names(tmp_path) == ["step_11", "step_20.superseded"]  # moved aside, not deleted


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
    manager.abort(staging)
    (second / COMPLETE_MARKER).unlink()
    with pytest.raises(CheckpointError, match="COMPLETE"):
        manager.resolve_resume(str(second))
    assert manager.resolve_resume("auto") == first
    assert names(manager.root) == ["step_1", "step_2.damaged"]


def test_auto_resume_moves_a_truncated_newest_checkpoint_aside_and_that_step_saves_again(tmp_path, warnings):
    # issue 12: bytes cut from step_2/trainer_state.json after it committed
    manager = CheckpointManager(tmp_path, keep_last=0)
    for step in (1, 2):
        with manager.staging(step) as tmp:
            write_payload(tmp, step)
            save_trainer_state(tmp, {"global_step": step, "note": "x" * 50})
    state = manager.path_for(2) / "trainer_state.json"
    state.write_bytes(state.read_bytes()[:-10])
    assert manager.resolve_resume("auto") == manager.path_for(1)
    assert names(tmp_path) == ["step_1", "step_2.damaged"]
    damaged = next(tmp_path.glob("step_2.damaged-*"))
    assert damaged.joinpath("policy", "model_states.pt").is_file()  # moved whole, not deleted
    assert any("step_2" in m and "trainer_state.json has" in m and "manifest says" in m for m in warnings)
    with manager.staging(2) as tmp:  # the retrained step 2 is saved: no collision with the damaged one
        save_trainer_state(tmp, {"global_step": 2})
    assert manager.resolve_resume("auto") == manager.path_for(2)
    assert load_trainer_state(manager.path_for(2)) == {"global_step": 2}


def test_same_size_corruption_is_caught_by_the_checksum(tmp_path, warnings):
    manager = CheckpointManager(tmp_path, keep_last=0)
    first, second = save(manager, 1), save(manager, 2)
    weights = second / "policy" / "model_states.pt"
    data = bytearray(weights.read_bytes())
    data[50] ^= 0xFF  # one flipped byte, same size
    weights.write_bytes(bytes(data))
    assert "policy/model_states.pt: sha256 differs" in check_complete(second)
    assert CheckpointManager(tmp_path, keep_last=0, verify="size").resolve_resume("auto") == second  # sizes only
    assert manager.resolve_resume("auto") == first
    assert names(tmp_path) == ["step_1", "step_2.damaged"]


def test_all_damaged_is_an_error_that_deletes_nothing(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    for step in (1, 2):
        save(manager, step)
        (manager.path_for(step) / "note.txt").unlink()
    with pytest.raises(NoCompleteCheckpointError) as err:
        manager.resolve_resume("auto")
    text = str(err.value)
    assert "step_1 (moved aside to step_1.damaged-" in text and "step_2 (moved aside to step_2.damaged-" in text
    assert "missing file note.txt" in text and "resume=none" in text and "Nothing was deleted" in text
    assert names(tmp_path) == ["step_1.damaged", "step_2.damaged"]
    assert all((p / "policy" / "model_states.pt").is_file() for p in tmp_path.iterdir())
    with pytest.raises(NoCompleteCheckpointError, match="moved aside by an earlier resume"):
        manager.resolve_resume("auto")  # a second try does not start over either
    assert manager.resolve_resume("none") is None  # starting afresh is a deliberate choice
    save(manager, 1)
    assert manager.resolve_resume("auto") == manager.path_for(1)


def test_the_only_checkpoint_damaged_is_an_error_not_a_restart_from_zero(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=1)
    for step in (1, 2):
        save(manager, step)
    assert names(tmp_path) == ["step_2"]
    (manager.path_for(2) / "note.txt").write_text("step 2!")  # 7 bytes where 6 were written
    with pytest.raises(NoCompleteCheckpointError, match=r"step_2 .*note.txt has 7 bytes, the manifest says 6"):
        manager.resolve_resume("auto")


def test_a_killed_save_leaves_the_previous_checkpoint_and_its_leftovers_go_at_resume(tmp_path, warnings):
    manager = CheckpointManager(tmp_path, keep_last=0)
    good = save(manager, 1)
    leftovers = [crash_leftover(tmp_path, 2), crash_leftover(tmp_path, 2, kind="old")]
    fresh = CheckpointManager(tmp_path, keep_last=0)  # the next process
    assert fresh.resolve_resume("auto") == good and is_complete(good)
    assert not any(p.exists() for p in leftovers) and names(tmp_path) == ["step_1"]
    assert any("interrupted save" in m and ".step_2.tmp-crashed" in m for m in warnings)
    crash_leftover(tmp_path, 5)
    staging = fresh.begin(2)  # begin cleans up too, keeping its own staging folder
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [staging.name]


def test_explicit_older_resume_and_fresh_start_set_another_history_aside(tmp_path, warnings):
    manager = CheckpointManager(tmp_path, keep_last=0)
    for step in (1, 2, 3):
        save(manager, step)
    path = manager.resolve_resume("step_1")
    assert path == manager.path_for(1) and names(tmp_path) == ["step_1", "step_2", "step_3"]  # nothing moved yet
    assert any("step_2, step_3" in m and "another history" in m for m in warnings)
    moved = manager.start_from(path)  # the caller accepted the resume (config checks passed)
    assert sorted(p.name.split("-")[0] for p in moved) == ["step_2.superseded", "step_3.superseded"]
    assert manager.resolve_resume("auto") == path
    manager.start_from(None)  # resume=none: the whole old run is set aside
    assert names(tmp_path) == ["step_1.superseded", "step_2.superseded", "step_3.superseded"]
    assert manager.resolve_resume("auto") is None  # superseded folders were abandoned on purpose: a fresh start


def test_verify_levels(tmp_path):
    with pytest.raises(ValueError, match="verify='marker'"):
        CheckpointManager(tmp_path, keep_last=0, verify="marker")
    manager = CheckpointManager(tmp_path, keep_last=0, verify="size")
    path = save(manager, 1)
    (path / "note.txt").write_text("step 9")  # same size, other bytes
    assert manager.latest() == path and manager.list_complete(verify="full") == []


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

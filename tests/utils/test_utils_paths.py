"""Folder writes that never expose a half-written folder and never lose the old one; folders set aside, not deleted."""

from __future__ import annotations

import pytest

from reasonrl.utils.paths import atomic_directory, move_aside


def test_atomic_directory_appears_complete_or_not_at_all(tmp_path):
    final = tmp_path / "model"
    with pytest.raises(RuntimeError):
        with atomic_directory(final) as tmp:
            (tmp / "a").write_text("partial")
            raise RuntimeError("crash mid-write")
    assert list(tmp_path.iterdir()) == []
    with atomic_directory(final) as tmp:
        (tmp / "a").write_text("done")
    assert (final / "a").read_text() == "done" and list(tmp_path.iterdir()) == [final]
    with atomic_directory(final) as tmp:
        (tmp / "a").write_text("second copy")
    assert (final / "a").read_text() == "done", "without replace, the first complete copy wins"


def test_replace_swaps_in_the_new_folder_only_after_success(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "weights").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_directory(final, replace=True) as tmp:
            (tmp / "weights").write_text("half")
            raise RuntimeError("crash mid-export")
    assert (final / "weights").read_text() == "old" and list(tmp_path.iterdir()) == [final]
    with atomic_directory(final, replace=True) as tmp:
        (tmp / "weights").write_text("new")
        assert (final / "weights").read_text() == "old", "the old folder stays until the new one is complete"
    assert (final / "weights").read_text() == "new" and list(tmp_path.iterdir()) == [final]
    with atomic_directory(tmp_path / "fresh", replace=True) as tmp:
        (tmp / "x").write_text("1")
    assert (tmp_path / "fresh" / "x").read_text() == "1"


def test_move_aside_renames_with_tag_and_time_and_never_overwrites(tmp_path):
    first = tmp_path / "step_2"
    first.mkdir()
    (first / "w").write_text("1")
    moved = move_aside(first, "damaged")
    assert moved.parent == tmp_path and moved.name.startswith("step_2.damaged-") and not first.exists()
    assert (moved / "w").read_text() == "1"
    first.mkdir()  # the same name again within the same second gets a suffix, the first one is kept
    again = move_aside(first, "damaged")
    assert again.name == moved.name + "-2" and (moved / "w").read_text() == "1"

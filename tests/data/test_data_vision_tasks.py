"""The generated visual task: each picture shows as many dots as its answer says, held-out boards never occur in
training, and the built-in sources write their pictures as files next to the rows."""

from __future__ import annotations

import numpy as np

from reasonrl.data import load_rows
from reasonrl.data.vision_tasks import DotCountTask


def _dark_cells(picture: np.ndarray, grid: int) -> int:
    """Cells of the board that hold dark pixels (a dot): counted from the pixels, independently of the generator."""
    cell = picture.shape[0] // grid
    dark = picture.mean(axis=2) < 150
    return sum(
        bool(dark[r * cell : (r + 1) * cell, c * cell : (c + 1) * cell].any()) for r in range(grid) for c in range(grid)
    )


def test_every_picture_shows_as_many_dots_as_its_answer():
    task = DotCountTask(train_size=60, heldout_size=20)
    for split in ("train", "heldout"):
        for row in task.rows(split):
            assert row["question"].startswith("<image>")
            assert _dark_cells(row["images"][0], task.grid) == int(row["answer"]), row["id"]


def test_held_out_boards_never_occur_in_training_and_rows_are_deterministic():
    task = DotCountTask(train_size=2000, heldout_size=100)
    train = {cells for cells, _ in task.boards("train")}
    held = [cells for cells, _ in task.boards("heldout")]
    assert len(set(held)) == len(held) and not train & set(held)
    assert task.boards("heldout") == DotCountTask(train_size=2000, heldout_size=100).boards("heldout")
    counts = {len(cells) for cells in train}
    assert counts == set(range(task.min_count, task.max_count + 1))


def test_the_built_in_sources_load_with_their_pictures():
    rows = load_rows("dots_heldout").rows
    assert len(rows) == DotCountTask().heldout_size
    assert all(r["images"][0].shape == (56, 56, 3) for r in rows)
    assert all(_dark_cells(r["images"][0], 4) == int(r["answer"]) for r in rows[:50])

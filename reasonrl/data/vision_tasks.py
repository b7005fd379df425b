"""Counting dots in a picture: the generated visual task of the vision-language demo and tests.

    task = DotCountTask()
    task.rows("train")[0]       # {"id": ..., "question": "<image>How many dots?", "answer": "5", "images": [array]}
    train, heldout = task_files(task)    # jsonl files whose rows name PNG files next to them (train_data= / eval_data=)

Each picture is ``image_size`` pixels square, cut into a ``grid`` x ``grid`` board of cells (by default 4 x 4 cells of
14 pixels: exactly the vision tower's patches of the tiny VLM, ``reasonrl.models.tiny_vlm``); ``count`` cells, from
``min_count`` to ``max_count``, hold a dark dot of a random radius at a random place inside the cell, on a light
background with faint noise. The question asks how many dots there are; the answer is the count (exact match,
``reasonrl.data.arithmetic:reward``, or the math scorer: a bare number).

The held-out split is disjoint from training by construction: a board (the set of cells holding a dot) whose hash
falls in the held-out bucket never occurs in training. Every row is a pure function of ``(seed, split, index)``.

Built-in data sources (:data:`reasonrl.data.arithmetic.GENERATED_DATASETS`, written on first use with their PNG
files): ``dots_train`` (4,000 rows) and ``dots_heldout`` (200 distinct boards).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import random
from pathlib import Path

QUESTION = "<image>How many dots?"


@dataclasses.dataclass(frozen=True)
class DotCountTask:
    """Pictures of ``min_count .. max_count`` dots on a ``grid`` x ``grid`` board of ``image_size`` pixels."""

    image_size: int = 56
    grid: int = 4
    min_count: int = 1
    max_count: int = 9
    train_size: int = 4000
    heldout_size: int = 200
    heldout_frac: float = 0.1
    seed: int = 0

    def __post_init__(self):
        if not 1 <= self.min_count <= self.max_count <= self.grid**2:
            raise ValueError(f"need 1 <= min_count <= max_count <= grid**2, got {self.min_count}..{self.max_count}")
        if self.image_size % self.grid:
            raise ValueError(f"image_size {self.image_size} must be a multiple of grid {self.grid}")

    @property
    def key(self) -> str:
        return (
            f"dots-i{self.image_size}-g{self.grid}-c{self.min_count}-{self.max_count}-n{self.train_size}"
            f"-h{self.heldout_size}-s{self.seed}"
        )

    def is_heldout(self, cells: tuple[int, ...]) -> bool:
        """Whether a board (its sorted dot cells) belongs to the held-out bucket (a stable hash)."""
        digest = hashlib.sha1(f"{self.seed}:{cells}".encode()).digest()
        return int.from_bytes(digest[:4], "big") < self.heldout_frac * 2**32

    def draw(self, cells: tuple[int, ...], rng: random.Random):
        """The picture of a board: uint8 ``[image_size, image_size, 3]``."""
        import numpy as np
        from PIL import Image, ImageDraw

        cell = self.image_size // self.grid
        noise = np.asarray([[rng.randint(225, 255) for _ in range(self.image_size)] for _ in range(self.image_size)])
        image = Image.fromarray(np.repeat(noise[:, :, None], 3, axis=2).astype(np.uint8))
        pen = ImageDraw.Draw(image)
        for c in cells:
            row, col = divmod(c, self.grid)
            r = rng.randint(max(2, cell // 5), max(3, cell // 3))
            cx = col * cell + rng.randint(r, cell - r - 1)
            cy = row * cell + rng.randint(r, cell - r - 1)
            shade = rng.randint(0, 90)
            pen.ellipse((cx - r, cy - r, cx + r, cy + r), fill=(shade, shade, shade))
        return np.asarray(image, dtype=np.uint8)

    def boards(self, split: str) -> list[tuple[tuple[int, ...], int]]:
        """``(cells, picture seed)`` per row of ``split``: sampled with replacement for training, distinct boards
        for held-out; the count is uniform over ``min_count .. max_count``."""
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        want_heldout = split == "heldout"
        size = self.heldout_size if want_heldout else self.train_size
        rng = random.Random(f"{self.seed}:{split}")
        out, seen = [], set()
        while len(out) < size:
            count = rng.randint(self.min_count, self.max_count)
            cells = tuple(sorted(rng.sample(range(self.grid**2), count)))
            if self.is_heldout(cells) != want_heldout or (want_heldout and cells in seen):
                continue
            seen.add(cells)
            out.append((cells, rng.getrandbits(32)))
        return out

    def rows(self, split: str) -> list[dict]:
        """Rows of ``split`` with their pictures as uint8 arrays (``images``)."""
        return [
            {
                "id": f"{self.key}-{split}-{i}",
                "question": QUESTION,
                "answer": str(len(cells)),
                "images": [self.draw(cells, random.Random(picture_seed))],
            }
            for i, (cells, picture_seed) in enumerate(self.boards(split))
        ]

    def write_split(self, folder: Path, split: str) -> None:
        """``<split>.jsonl`` in ``folder``, its rows naming PNG files under ``images/`` (paths relative to it)."""
        from PIL import Image

        (folder / "images").mkdir(exist_ok=True)
        lines = []
        for row in self.rows(split):
            name = f"images/{split}-{row['id'].rsplit('-', 1)[1]}.png"
            buffer = io.BytesIO()
            Image.fromarray(row["images"][0]).save(buffer, format="PNG")
            (folder / name).write_bytes(buffer.getvalue())
            lines.append(json.dumps({**row, "images": [name]}) + "\n")
        (folder / f"{split}.jsonl").write_text("".join(lines), encoding="utf-8")

"""A procedural arithmetic task with an exact-match reward: the task the CPU learning demo and tests train on.

    task = ArithmeticTask(op="add", digits=2)
    train, heldout = task.rows("train"), task.rows("heldout")     # {"id", "question": "47+85=", "answer": "132"}
    train_path, heldout_path = task_files(task)                   # cached jsonl files (train_data= / eval_data=)
    reward("132", "132") == 1.0                                   # reward_fn="reasonrl.data.arithmetic:reward"

The default task is also a built-in data source: ``train_data=["arith_add2_train"]`` /
``eval_data=["arith_add2_heldout"]`` (:data:`GENERATED_DATASETS`, written on first use; it also lists the
programming tasks of :mod:`reasonrl.data.code_tasks` and the calculator-tool tasks of :mod:`reasonrl.data.tool_tasks`).

Problems are ``a <op> b`` with operands drawn uniformly from the ``digits``-digit integers (``10 .. 99`` for 2).
Every problem is a pure function of ``(seed, index)``, and the held-out split is disjoint from the training split
by construction: a problem whose ordered pair ``(a, b)`` hashes into the held-out bucket (``heldout_frac`` of all
pairs) never appears in training (its commuted twin ``b+a`` may: the split is by ordered pair). The prompt is
the bare expression (``prompt_template="plain"``), the target the decimal result followed by EOS, so a tokenizer
that splits digits (the tiny Qwen2's does) sees one token per digit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import time
from pathlib import Path

from reasonrl.data.code_tasks import CodeTaskSet
from reasonrl.data.tool_tasks import ToolMulTask, ToolTraceSet
from reasonrl.data.vision_tasks import DotCountTask
from reasonrl.utils.paths import atomic_directory, cache_root

OPS = {"add": ("+", lambda a, b: a + b), "sub": ("-", lambda a, b: a - b), "mul": ("*", lambda a, b: a * b)}


@dataclasses.dataclass(frozen=True)
class ArithmeticTask:
    """``a <op> b`` with ``digits``-digit operands (``b_digits`` for the second one, default the same)."""

    op: str = "add"
    digits: int = 2
    b_digits: int | None = None
    train_size: int = 20000
    heldout_size: int = 200
    heldout_frac: float = 0.1
    seed: int = 0

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"op must be one of {sorted(OPS)}, got {self.op!r}")
        if not 1 <= self.digits <= 6 or not 1 <= (self.b_digits or self.digits) <= 6:
            raise ValueError("digits must be between 1 and 6")

    @property
    def key(self) -> str:
        """A short stable name of this task (cache folders and recipe keys)."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True)
        return (
            f"arith-{self.op}{self.digits}x{self.b_digits or self.digits}-{hashlib.sha1(blob.encode()).hexdigest()[:8]}"
        )

    def is_heldout(self, a: int, b: int) -> bool:
        """Whether the pair belongs to the held-out bucket (a stable hash, independent of the sampling order)."""
        digest = hashlib.sha1(f"{self.seed}:{a}:{b}".encode()).digest()
        return int.from_bytes(digest[:4], "big") < self.heldout_frac * 2**32

    def repeat_reason(self, split: str) -> str | None:
        """Why ``split`` repeats problems (see :func:`reasonrl.data.sources.repeats_by_design`)."""
        if split != "train":
            return None
        pairs = (10**self.digits - 10 ** (self.digits - 1)) * (
            10 ** (self.b_digits or self.digits) - 10 ** ((self.b_digits or self.digits) - 1)
        )
        return (
            f"{self.train_size} problems drawn with replacement from ~{round(pairs * (1 - self.heldout_frac))} "
            "training pairs (the held-out pairs never occur): a problem recurs by design"
        )

    def problem(self, a: int, b: int) -> tuple[str, str]:
        symbol, fn = OPS[self.op]
        return f"{a}{symbol}{b}=", str(fn(a, b))

    def rows(self, split: str) -> list[dict]:
        """``train_size`` / ``heldout_size`` rows of ``split`` ("train", "heldout" or "val"), sampled with replacement
        for training and without replacement for held-out (distinct problems), deterministic by ``seed``.

        ``val`` (``heldout_size`` distinct problems) is the validation split of the warm starts' accuracy band
        (:mod:`reasonrl.sft.band`): pairs of the held-out bucket (never trained on) that the held-out split does not
        hold, so the band is never chosen on the problems the demos report."""
        if split not in ("train", "heldout", "val"):
            raise ValueError(f"split must be 'train', 'heldout' or 'val', got {split!r}")
        want_heldout = split != "train"
        size = self.heldout_size if want_heldout else self.train_size
        rng = random.Random(f"{self.seed}:{split}")
        lo_a, hi_a = 10 ** (self.digits - 1), 10**self.digits - 1
        b_digits = self.b_digits or self.digits
        lo_b, hi_b = 10 ** (b_digits - 1), 10**b_digits - 1
        bucket = (hi_a - lo_a + 1) * (hi_b - lo_b + 1) * self.heldout_frac * 0.8  # held-out pairs, with a margin
        if want_heldout and size * (2 if split == "val" else 1) > bucket:
            raise ValueError(
                f"heldout_size={size} is too large for {self.digits}x{b_digits}-digit problems"
                + (" (the val split takes as many other held-out pairs)" if split == "val" else "")
            )
        rows: list[dict] = []
        seen = {_pair(r["question"]) for r in self.rows("heldout")} if split == "val" else set()
        while len(rows) < size:
            a, b = rng.randint(lo_a, hi_a), rng.randint(lo_b, hi_b)
            if self.is_heldout(a, b) != want_heldout or (want_heldout and (a, b) in seen):
                continue
            seen.add((a, b))
            question, answer = self.problem(a, b)
            rows.append({"id": f"{self.key}-{split}-{len(rows)}", "question": question, "answer": answer})
        return rows


def _pair(question: str) -> tuple[int, int]:
    """``(a, b)`` of a question ``"a<op>b="`` (the operands are non-negative)."""
    a, b = re.split(r"[-+*]", question.rstrip("="), maxsplit=1)
    return int(a), int(b)


GeneratedTask = ArithmeticTask | CodeTaskSet | ToolMulTask | ToolTraceSet | DotCountTask


def task_files(task: GeneratedTask, cache_dir: Path | None = None) -> tuple[Path, Path]:
    """``(train.jsonl, heldout.jsonl)`` of ``task``, written once under ``<cache>/data/<task.key>/``."""
    folder = Path(cache_dir or cache_root() / "data") / task.key
    if not (folder / "heldout.jsonl").exists():
        with atomic_directory(folder) as tmp:
            for split in ("train", "heldout"):
                if hasattr(task, "write_split"):  # rows with files of their own (the pictures of a visual task)
                    task.write_split(tmp, split)
                    continue
                lines = (json.dumps(row) + "\n" for row in task.rows(split))
                (tmp / f"{split}.jsonl").write_text("".join(lines), encoding="utf-8")
    return folder / "train.jsonl", folder / "heldout.jsonl"


# Built-in names of generated datasets (``load_rows`` / ``train_data`` / ``eval_data``): name -> (task, split). A task
# is anything with a ``key`` and ``rows(split)``: the arithmetic task here, the programming tasks of ``code_tasks``,
# the calculator-tool multiplication of ``tool_tasks`` and its SFT conversations (with and without the tool).
GENERATED_DATASETS: dict[str, tuple[GeneratedTask, str]] = {
    "arith_add2_train": (ArithmeticTask(), "train"),
    "arith_add2_heldout": (ArithmeticTask(), "heldout"),
    "arith_add2_val": (ArithmeticTask(), "val"),  # the warm start's accuracy band (never the reported held-out set)
    "code_train": (CodeTaskSet(), "train"),
    "code_heldout": (CodeTaskSet(), "heldout"),
    "tool_mul_train": (ToolMulTask(), "train"),
    "tool_mul_heldout": (ToolMulTask(), "heldout"),
    "tool_mul_sft_train": (ToolTraceSet(), "train"),
    "tool_mul_sft_heldout": (ToolTraceSet(), "heldout"),
    "tool_mul_notool_sft_train": (ToolTraceSet(use_tool=False), "train"),
    "tool_mul_notool_sft_heldout": (ToolTraceSet(use_tool=False), "heldout"),
    "dots_train": (DotCountTask(), "train"),
    "dots_heldout": (DotCountTask(), "heldout"),
}


def generated_dataset_path(name: str) -> Path:
    """The jsonl file of a generated built-in dataset (see :data:`GENERATED_DATASETS`), written on first use."""
    if name not in GENERATED_DATASETS:
        raise KeyError(f"unknown generated dataset {name!r}; available: {sorted(GENERATED_DATASETS)}")
    task, split = GENERATED_DATASETS[name]
    train, heldout = task_files(task)
    if split == "val":  # a later split: written beside the others on first use (one writer wins, whole files only)
        path = heldout.with_name("val.jsonl")
        if not path.exists():
            _write_later_split(task, path)
        return path
    return train if split == "train" else heldout


def _write_later_split(task: GeneratedTask, path: Path) -> None:
    """``path`` (``<split>.jsonl`` of a task folder written before the split existed): written to a scratch file,
    then renamed, so a reader sees the whole split or none."""
    scratch = path.with_name(f".{path.stem}-{os.getpid()}-{time.time_ns()}.jsonl")
    try:
        scratch.write_text("".join(json.dumps(row) + "\n" for row in task.rows(path.stem)), encoding="utf-8")
        os.replace(scratch, path)
    finally:
        scratch.unlink(missing_ok=True)


def reward(response: str, gold: str, **meta) -> float:
    """Exact match: ``1.0`` when the response ended by itself (finish reason ``stop``, i.e. EOS) and its text,
    stripped of surrounding whitespace, equals the gold answer; else ``0.0``.

    ``meta`` may carry the finish reason as ``finish_reason`` or ``finish_reasons`` (what ``UserFnScorer`` passes).
    """
    finish = meta.get("finish_reason", meta.get("finish_reasons", "stop"))
    return float(finish == "stop" and response.strip() == str(gold).strip())

"""Training data that overlaps an evaluation set, by source and by question text.

    question_key("What is  2+2?\\n")          # -> "what is 2+2?" (NFKC, case-folded, whitespace collapsed)
    shared_sources(["data"], ["data/test.jsonl"])   # -> [("data", "data/test.jsonl", ".../data/test.jsonl")]
    text_overlaps(train_rows, {"gsm8k_test": rows})  # -> [Overlap(eval_set="gsm8k_test", count=..., ...)]

Training on rows of an evaluation set makes its scores meaningless, silently. Two checks find it before anything
starts: :func:`shared_sources` compares what the configured sources read, without reading rows (the same file,
built-in name or split, or a folder that holds an eval file; config validation); :func:`text_overlaps` compares
the loaded rows' questions (``BasePPOExp``'s hook check), which also catches the same problems copied into
another file. Questions are compared by :func:`question_key` (a row with images: with its pictures): one hash-set
lookup per row (GSM8K train against GSM8K test + MATH-500: 0.03 s on 2 CPU cores).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reasonrl.data.images import images_fingerprint
from reasonrl.data.sources import DataFormatError, source_identity


def question_key(text: str) -> str:
    """The form in which two questions are compared: Unicode NFKC, case-folded, runs of whitespace as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def shared_sources(train: Sequence[str], evals: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(train source, eval source, one shared item)`` for every training source that reads data an evaluation
    source reads (:func:`reasonrl.data.sources.source_identity`). Sources that cannot be resolved are left out
    (config validation reports them)."""

    def identity(source: str) -> set[tuple[str, ...]]:
        try:
            return source_identity(source)
        except (DataFormatError, OSError):
            return set()

    eval_ids = [(source, identity(source)) for source in evals]
    out = []
    for t in train:
        t_id = identity(t)
        for e, e_id in eval_ids:
            shared = sorted(t_id & e_id)
            if shared:
                out.append((t, e, shared[0][1]))
    return out


@dataclass(frozen=True)
class Overlap:
    """Rows of one evaluation set whose question is also the question of a training row."""

    eval_set: str
    train_source: str | None  # the ``source`` field of the training rows that hold the shared questions
    count: int  # evaluation rows whose question is in the training rows of ``train_source``
    eval_rows: int  # rows in the evaluation set
    example_id: str | None  # the first shared evaluation row
    example: str

    def describe(self) -> str:
        shown = self.example if len(self.example) <= 80 else self.example[:77] + "..."
        row = f"id {self.example_id!r}: " if self.example_id is not None else ""
        source = "" if self.train_source is None else f" (training rows of source {self.train_source!r})"
        return (
            f"eval set {self.eval_set!r}: {self.count} of its {self.eval_rows} questions are also training "
            f"questions{source}, e.g. {row}{shown!r}"
        )


def _questions(rows: Iterable[Mapping]) -> Iterable[tuple[Mapping, str]]:
    """``(row, key)`` per row with a string question; a vision-language row's key adds its pictures' fingerprint
    (one question over different pictures is a different problem)."""
    for row in rows:
        question = row.get("question") if isinstance(row, Mapping) else None
        if isinstance(question, str):
            images = row.get("images")
            yield row, question_key(question) + (f"\x00{images_fingerprint(images)}" if images else "")


def text_overlaps(train_rows: Iterable[Mapping], eval_sets: Mapping[str, Iterable[Mapping]]) -> list[Overlap]:
    """Every (evaluation set, training source) pair that shares questions (:func:`question_key`), with the number
    of shared evaluation rows and the first one. Rows without a string ``question`` are not compared."""
    index: dict[str, str | None] = {}
    for row, key in _questions(train_rows):
        source = row.get("source")
        index.setdefault(key, None if source is None else str(source))
    out = []
    for name, rows in eval_sets.items():
        rows = list(rows)
        shared: dict[str | None, list[Mapping]] = {}
        for row, key in _questions(rows):
            if key in index:
                shared.setdefault(index[key], []).append(row)
        for source, hits in shared.items():
            first = hits[0]
            example_id = str(first["id"]) if "id" in first else None
            out.append(Overlap(str(name), source, len(hits), len(rows), example_id, first["question"]))
    return out

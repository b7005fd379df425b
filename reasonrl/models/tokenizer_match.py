"""Whether two models read token ids the same way: a distillation teacher scores the student's sampled token ids as
they are, so both must map every token to the same id (``reasonrl.run.checks`` refuses a teacher otherwise, before
anything starts). Tokenizers are passed in loaded; nothing here reads a config."""

from __future__ import annotations

import json
from pathlib import Path


def model_vocab_size(folder: str | Path) -> int | None:
    """Rows of the model's token embedding (``config.json`` ``vocab_size``, or its ``text_config``'s), or None."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text())
    size = config.get("vocab_size", (config.get("text_config") or {}).get("vocab_size"))
    return int(size) if size is not None else None


def tokenizer_differences(student, teacher, teacher_vocab_size: int | None = None, limit: int = 3) -> list[str]:
    """Why ids of ``student`` (a Hugging Face tokenizer) would not mean the same tokens to a model that reads
    ``teacher``'s: tokens with another id or missing in one of them (``limit`` examples each), a different EOS id,
    and ids the teacher's embedding (``teacher_vocab_size`` rows) does not have. Empty when they match."""
    a, b = student.get_vocab(), teacher.get_vocab()
    out = []
    moved = sorted(t for t in a.keys() & b.keys() if a[t] != b[t])
    only_student = sorted(a.keys() - b.keys(), key=a.get)
    only_teacher = sorted(b.keys() - a.keys(), key=b.get)
    if moved:
        examples = ", ".join(f"{t!r} {a[t]} vs {b[t]}" for t in moved[:limit])
        out.append(f"{len(moved)} tokens have another id (e.g. {examples})")
    if only_student:
        examples = ", ".join(repr(t) for t in only_student[:limit])
        out.append(f"{len(only_student)} of the student's {len(a)} tokens are not in the teacher's (e.g. {examples})")
    if only_teacher:
        examples = ", ".join(repr(t) for t in only_teacher[:limit])
        out.append(f"{len(only_teacher)} of the teacher's {len(b)} tokens are not in the student's (e.g. {examples})")
    if student.eos_token_id != teacher.eos_token_id:
        out.append(f"the EOS id differs ({student.eos_token_id} vs {teacher.eos_token_id})")
    top = max(a.values(), default=-1)
    if teacher_vocab_size is not None and top >= teacher_vocab_size:
        out.append(f"the student's ids reach {top}, past the teacher model's {teacher_vocab_size} embedding rows")
    return out

"""The Python code of README.md and of the documentation pages (docs/**/*.md) runs, so the documentation cannot rot.

The fence language alone decides what runs: every block fenced as ```` ```python ```` is a complete program and is
run; ```` ```py ```` (a Python snippet shown, highlighted, never run), ```` ```bash ````, ```` ```text ```` and any
other fence never are. A Python fragment that cannot run on its own (elided arguments, ``...``) must therefore be
fenced as something other than ``python``; there is no skip list. Each runnable block costs suite time (some start
a real training run), so keep them few.

Each block is compiled (fast), then run as a script in a fresh interpreter with the repository on ``PYTHONPATH``
(so its own imports, ``playground.*`` included, work as they do from the repository root) and a temporary folder
as the working directory, so the relative ``ckpt/`` and ``logs/`` folders it writes land there. Paths
``logs/<name>/summary.png`` that a block's comments promise must exist afterwards. Test ids name the file and the
line of the fence, e.g. ``docs/notebook.md:3``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, code)`` of every ```` ```python ```` block of a markdown text (indented fences dedented)."""
    return [(text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group("code"))) for m in _FENCE.finditer(text)]


def doc_files() -> list[str]:
    """README.md, then every page under docs/, as paths relative to the repository."""
    return ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.md"))]


BLOCKS = [(f"{name}:{line}", code) for name in doc_files() for line, code in python_blocks((REPO / name).read_text())]
IDS = [where for where, _ in BLOCKS]


def test_python_blocks_are_found_by_fence_language():
    sample = (
        "```bash\nmake demo\n```\n\n- item\n\n  ```python\n  print(1)\n  ```\n\n```text\nx(...)\n```\n\n"
        "```py\nshown(...)\n```\n"
    )
    assert python_blocks(sample) == [(7, "print(1)\n")]  # only the python fence, dedented; py, bash, text never run
    assert any("BasePPOExp" in code for _, code in BLOCKS), "the documentation lost its notebook example"
    assert {where.split(":")[0] for where in IDS} >= {"docs/notebook.md", "docs/evaluation.md"}, IDS


@pytest.mark.parametrize("where,code", BLOCKS, ids=IDS)
def test_python_block_compiles(where, code):
    compile(code, where, "exec")


@pytest.mark.integration
@pytest.mark.parametrize("where,code", BLOCKS, ids=IDS)
def test_python_block_runs(tmp_path, where, code):
    script = tmp_path / f"{re.sub(r'[^A-Za-z0-9]+', '_', where)}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, f"{where} failed:\n{out.stdout[-2000:]}\n{out.stderr[-6000:]}"
    for promised in re.findall(r"logs/[\w.-]+/summary\.png", code):
        assert (tmp_path / promised).is_file(), f"{where} promises {promised}, which was not written"

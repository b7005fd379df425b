"""README.md's Python code runs, so the documentation cannot rot.

The fence language alone decides what runs: every block fenced as ```` ```python ```` is a complete program and is
run; ```` ```bash ````, ```` ```text ```` and any other fence never are. A Python fragment that cannot run on its
own (elided arguments, ``...``) must therefore be fenced as something other than ``python`` (e.g. ``text``); there
is no skip list.

Each block is compiled (fast), then run as a script in a fresh interpreter with the repository on ``PYTHONPATH``
(so its own imports, ``playground.*`` included, work as they do from the repository root) and a temporary folder
as the working directory, so the relative ``ckpt/`` and ``logs/`` folders it writes land there. Paths
``logs/<name>/summary.png`` that a block's comments promise must exist afterwards.
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


BLOCKS = python_blocks((REPO / "README.md").read_text(encoding="utf-8"))


def test_python_blocks_are_found_by_fence_language():
    sample = "```bash\nmake demo\n```\n\n- item\n\n  ```python\n  print(1)\n  ```\n\n```text\nx(...)\n```\n"
    assert python_blocks(sample) == [(7, "print(1)\n")]  # only the python fence, dedented; bash and text never run
    assert any("BasePPOExp" in code for _, code in BLOCKS), "README.md lost its notebook example"


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_python_block_compiles(line, code):
    compile(code, f"README.md:{line}", "exec")


@pytest.mark.integration
@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_python_block_runs(tmp_path, line, code):
    script = tmp_path / f"readme_line{line}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, f"README.md:{line} failed:\n{out.stdout[-2000:]}\n{out.stderr[-6000:]}"
    for promised in re.findall(r"logs/[\w.-]+/summary\.png", code):
        assert (tmp_path / promised).is_file(), f"README.md:{line} promises {promised}, which was not written"

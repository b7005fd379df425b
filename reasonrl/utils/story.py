"""What ``python -m reasonrl.demo`` prints while it works: its phases, numbered, each with the time it took, and the
command that evaluates the final checkpoint again.

    [1/3] warm start arith-sft ...
    [1/3] warm start arith-sft: cached, 0 s
    [2/3] GRPO, 30 steps on Ray + DeepSpeed + vLLM (a progress bar shows in a terminal) ...
    [2/3] GRPO, 30 steps on Ray + DeepSpeed + vLLM: 131 s
    [3/3] check with plain transformers ...

The long waits have their own progress bars in a terminal: the SFT trainer's while a warm start is built, the RL
run's from start-up (its phase reads ``start-up`` until the first step: Ray, placement, the engine, the ranks) to
the last step, with the elapsed time moving (``reasonrl.utils.tracking``).
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TextIO


class Story:
    """The numbered phases of one demo run: ``with story.phase("warm start ...") as note: ...; note("cached")``."""

    def __init__(self, phases: int, out: TextIO | None = None):
        self.phases = phases
        self.done = 0
        self.out = out
        self.seconds: dict[str, float] = {}

    def _print(self, text: str) -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    @contextlib.contextmanager
    def phase(self, text: str):
        """Print ``[i/n] text ...``, run the block, then ``[i/n] text: <note, >N s``; the block may call the yielded
        function with a note (e.g. ``cached``). A failing block prints nothing more (its error says why)."""
        self.done += 1
        label = f"[{self.done}/{self.phases}] {text}"
        self._print(f"{label} ...")
        notes: list[str] = []
        start = time.perf_counter()
        yield notes.append
        seconds = time.perf_counter() - start
        self.seconds[text] = seconds
        self._print(f"{label}: {''.join(n + ', ' for n in notes)}{seconds:.0f} s")


def eval_command(final_model: Path) -> str:
    """The command that evaluates the run's final checkpoint again with its own eval settings (``final_model``: the
    exported ``<ckpt>/step_<n>/policy_hf``; ``reasonrl.eval`` takes the checkpoint folder)."""
    return f"python -m reasonrl.eval config={Path(final_model).parent}"

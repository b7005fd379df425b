"""What the demo prints while it works (reasonrl/utils/story.py): numbered phases with their times and notes, and the
command that evaluates the final checkpoint, in every task's summary."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from reasonrl.demo import DemoResult, agent_summary, code_summary, summary, tools_summary
from reasonrl.utils.story import Story, eval_command


def test_each_phase_prints_its_number_then_its_note_and_time():
    out = io.StringIO()
    story = Story(2, out=out)
    with story.phase("warm start x") as note:
        note("cached")
    with story.phase("GRPO, 3 steps"):
        pass
    lines = out.getvalue().splitlines()
    assert lines[0] == "[1/2] warm start x ..."
    assert re.fullmatch(r"\[1/2\] warm start x: cached, \d+ s", lines[1])
    assert lines[2] == "[2/2] GRPO, 3 steps ..."
    assert re.fullmatch(r"\[2/2\] GRPO, 3 steps: \d+ s", lines[3])
    assert set(story.seconds) == {"warm start x", "GRPO, 3 steps"}


def test_a_failing_phase_prints_no_time():
    out = io.StringIO()
    story = Story(1, out=out)
    with pytest.raises(RuntimeError), story.phase("build"):
        raise RuntimeError("boom")
    assert out.getvalue().splitlines() == ["[1/1] build ..."]


def test_the_eval_command_names_the_checkpoint_folder_of_the_exported_policy():
    assert eval_command(Path("ckpt/demo/demo_grpo/step_30/policy_hf")) == (
        "python -m reasonrl.eval config=ckpt/demo/demo_grpo/step_30"
    )


def result(task: str, tmp_path: Path) -> DemoResult:
    final = tmp_path / "ckpt" / f"demo_{task}" / "step_5" / "policy_hf"
    return DemoResult("grpo", 5, 0.5, 0.6, 0.1, 0.2, 50.0, 9.0, tmp_path / "logs", final, 0.0, task)


def test_every_summary_ends_a_run_with_its_curves_and_the_eval_command(tmp_path):
    r = result("math", tmp_path)
    want = f"evaluate it again: python -m reasonrl.eval config={r.final_model.parent}"
    texts = [
        summary([r], [(0.5, 0.6)], tmp_path / "sft", 10.0, True, 70.0),
        code_summary(result("code", tmp_path), (0.5, 0.6), tmp_path / "sft", "cached", 70.0),
        tools_summary({"tools": result("tools", tmp_path), "tools-notool": result("tools-notool", tmp_path)}, 1, 2),
        agent_summary({"agent": result("agent", tmp_path), "tools": result("tools", tmp_path)}, 1.0, 2.0),
    ]
    for text in texts:
        assert "evaluate it again: python -m reasonrl.eval config=" in text and "summary.png" in text
    assert want in texts[0]

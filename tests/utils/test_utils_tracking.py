"""Tracker: metrics.jsonl + TensorBoard, non-finite handling, generation dumps, resume truncation, documented names."""

import io
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from loguru import logger

from reasonrl.utils.metrics_file import metrics_by_step, read_metrics
from reasonrl.utils.scalars import SCALARS, format_metrics_line, known_scalar
from reasonrl.utils.tracking import Tracker

DOCS = Path(__file__).resolve().parents[2] / "docs" / "logging_and_checkpoints.md"


def tb_scalars(run_dir):
    """{tag: [(step, value)]} as TensorBoard would show them (orphaned events of crashed sessions purged)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def step_metrics(step):
    return {"reward/mean": step / 10, "policy/kl": 0.01 * step, "time/step": 1.0 + step}


def without_time(rows):
    return [{k: v for k, v in row.items() if k != "time"} for row in rows]


def test_log_metrics_writes_jsonl_and_tensorboard(tmp_path):
    with Tracker(tmp_path, "exp", progress_bar=False, summary_plot=False) as tracker:
        tracker.log_metrics(1, {"reward/mean": 0.5, "response/length_max": 7, "x/np": np.float32(0.25)})
        tracker.log_metrics(2, {"reward/mean": torch.tensor(0.75), "flag/on": True, "x/np": np.array([1.5])})
    run = tmp_path / "exp"
    rows = read_metrics(run / "metrics.jsonl")
    assert without_time(rows) == [
        {"step": 1, "reward/mean": 0.5, "response/length_max": 7, "x/np": 0.25},
        {"step": 2, "reward/mean": 0.75, "flag/on": 1, "x/np": 1.5},
    ]
    assert all(row["time"] > 0 for row in rows)
    assert tb_scalars(run)["reward/mean"] == [(1, 0.5), (2, 0.75)]
    assert list(run.glob("events.out.tfevents.*"))  # event files directly in the run dir
    assert (run / "train.log").read_text().count("step 1 | reward 0.5") == 1


def test_non_finite_values_are_null_counted_and_warned(tmp_path):
    messages = []
    sink = logger.add(lambda m: messages.append(str(m)), level="WARNING")
    try:
        with Tracker(tmp_path, "exp", progress_bar=False, summary_plot=False) as tracker:
            tracker.log_metrics(0, {"a/x": math.nan, "a/y": 1.0})
            tracker.log_metrics(1, {"a/x": math.inf, "a/z": -np.inf})
            assert dict(tracker.nonfinite_counts) == {"a/x": 2, "a/z": 1}
    finally:
        logger.remove(sink)
    raw = (tmp_path / "exp" / "metrics.jsonl").read_text()
    assert "NaN" not in raw and "Infinity" not in raw  # strict JSON
    assert without_time(read_metrics(tmp_path / "exp" / "metrics.jsonl")) == [
        {"step": 0, "a/x": None, "a/y": 1.0},
        {"step": 1, "a/x": None, "a/z": None},
    ]
    assert any("non-finite" in m and "a/x" in m for m in messages)
    assert "a/x" not in tb_scalars(tmp_path / "exp")


def test_rejects_non_numbers_and_reserved_names(tmp_path):
    with Tracker(tmp_path, "exp", enabled_tensorboard=False, progress_bar=False, summary_plot=False) as tracker:
        with pytest.raises(TypeError, match="a/s"):
            tracker.log_metrics(0, {"a/s": "text"})
        with pytest.raises(TypeError):
            tracker.log_metrics(0, {"a/v": torch.ones(3)})
        with pytest.raises(ValueError):
            tracker.log_metrics(0, {"step": 1.0})
    with pytest.raises(ValueError):
        Tracker(tmp_path, "a/b")


def test_resumed_run_logs_equal_uninterrupted_run(tmp_path):
    # uninterrupted: steps 0..9
    with Tracker(tmp_path, "full", progress_bar=False, summary_plot=False) as tracker:
        for step in range(10):
            tracker.log_metrics(step, step_metrics(step))
            tracker.dump_generations(step, [{"prompt": "p", "response": f"r{step}"}])
    # interrupted: steps 0..6 logged (with garbage for 5 and 6, as if those steps had gone differently),
    # the last checkpoint covers steps < 5, then a crash leaves a torn line
    with Tracker(tmp_path, "resumed", progress_bar=False, summary_plot=False) as tracker:
        for step in range(7):
            metrics = step_metrics(step) if step < 5 else {"reward/mean": -99.0, "policy/kl": -99.0}
            tracker.log_metrics(step, metrics)
            tracker.dump_generations(step, [{"prompt": "p", "response": f"r{step}" if step < 5 else "stale"}])
    with open(tmp_path / "resumed" / "metrics.jsonl", "a") as f:
        f.write('{"step": 7, "reward/me')
    time.sleep(1.05 - time.time() % 1)  # event file names carry whole seconds: keep the sessions' files ordered
    with Tracker(tmp_path, "resumed", progress_bar=False, summary_plot=False, start_step=5) as tracker:
        for step in range(5, 10):
            tracker.log_metrics(step, step_metrics(step))
            tracker.dump_generations(step, [{"prompt": "p", "response": f"r{step}"}])

    full, resumed = tmp_path / "full", tmp_path / "resumed"
    assert without_time(read_metrics(resumed / "metrics.jsonl")) == without_time(read_metrics(full / "metrics.jsonl"))
    assert (resumed / "metrics.jsonl.bak").exists()  # the dropped rows are not lost for good
    assert tb_scalars(resumed) == tb_scalars(full)
    assert tb_scalars(resumed)["reward/mean"][5] == (5, 0.5)
    for step in range(10):
        name = f"generations/step_{step}.jsonl"
        assert (resumed / name).read_text() == (full / name).read_text()


def test_start_step_zero_starts_the_logs_afresh_and_keeps_the_old_ones_aside(tmp_path):
    with Tracker(tmp_path, "exp", progress_bar=False, summary_plot=False) as tracker:
        tracker.log_metrics(0, {"a/x": 1.0})
        tracker.dump_generations(0, [{"response": "old"}])
    with Tracker(tmp_path, "exp", enabled_tensorboard=False, progress_bar=False, summary_plot=False) as tracker:
        tracker.log_metrics(0, {"a/x": 2.0})
    assert without_time(read_metrics(tmp_path / "exp" / "metrics.jsonl")) == [{"step": 0, "a/x": 2.0}]
    (old,) = tmp_path.glob("exp.prev-*")  # the earlier run's logs, whole: a separate run in TensorBoard
    assert without_time(read_metrics(old / "metrics.jsonl")) == [{"step": 0, "a/x": 1.0}]
    assert (old / "generations" / "step_0.jsonl").is_file() and tb_scalars(old)["a/x"] == [(0, 1.0)]
    assert not list((tmp_path / "exp").glob("events.out.tfevents.*"))


def test_dump_generations_keeps_text_as_is(tmp_path):
    records = [
        {
            "prompt": "What is 1+1? __import__('os').system('echo hi')",
            "response": "<think>ünïcode \\boxed{2}</think>\n",
            "gold": "2",
            "reward": np.float32(1.0),
            "reason": "correct",
            "finish_reason": "stop",
            "tokens": torch.tensor([1, 2, 3]),
            "logprob": float("nan"),
        }
    ]
    with Tracker(tmp_path, "exp", enabled_tensorboard=False, progress_bar=False, summary_plot=False) as tracker:
        path = tracker.dump_generations(3, records)
        tracker.dump_generations(3, records)  # appends
    assert path == tmp_path / "exp" / "generations" / "step_3.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    back = json.loads(lines[0])
    assert back["prompt"] == records[0]["prompt"] and back["response"] == records[0]["response"]
    assert back["reward"] == 1.0 and back["tokens"] == [1, 2, 3] and back["logprob"] is None


def test_table_progress_close_idempotent_and_summary(tmp_path):
    tracker = Tracker(tmp_path, "exp", progress_total=10, progress_bar=True, start_step=0)
    tracker.log_table_at_start("| key | value |\n| lr | 1e-6 |")
    for step in range(1, 4):
        tracker.log_metrics(step, {"reward/mean": step / 3, "time/step": 1.0})
        tracker.advance(step, {"reward": step / 3})
    tracker.close()
    tracker.close()
    tracker.advance(5)  # no-op after close
    with pytest.raises(RuntimeError, match="closed"):
        tracker.log_metrics(4, {"a/x": 1.0})
    run = tmp_path / "exp"
    assert (run / "config.txt").read_text() == "| key | value |\n| lr | 1e-6 |\n"
    assert (run / "summary.png").read_bytes().startswith(b"\x89PNG")
    assert "reward/mean" in (run / "summary.html").read_text()


def test_format_metrics_line():
    line = format_metrics_line(
        12,
        {"reward/mean": 0.41, "policy/kl": 0.0012, "time/generate": 8.123, "time/step": 9.5, "eval/aime/pass@4": 0.2},
    )
    assert line == "step 12 | reward 0.41 kl 0.0012 step_s 9.5 | generate 8.12s | eval/aime/pass@4 0.2"


def test_metrics_by_step_merges_rows():
    rows = [{"step": 1, "time": 0, "a": 1}, {"step": 1, "time": 1, "b": 2}, {"step": 0, "time": 2, "a": 0}]
    assert metrics_by_step(rows) == {0: {"a": 0}, 1: {"a": 1, "b": 2}}


def test_scalar_names_are_unique_documented_and_matchable():
    names = [s.name for s in SCALARS]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z_]+/[a-z_<>@]+(/[a-z0-9_@<>]+)?", n) for n in names), names
    assert all(s.meaning for s in SCALARS)
    assert known_scalar("reward/mean") and known_scalar("eval/math500/pass@16") and known_scalar("eval/aime24/avg@4")
    assert not known_scalar("reward/unknown") and not known_scalar("eval/a/b/pass@4")
    docs = DOCS.read_text()
    missing = [n for n in names if f"`{n}`" not in docs]
    assert not missing, f"scalars not documented in {DOCS.name}: {missing}"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_terminal_the_bar_redraws_every_second_so_a_long_phase_shows_its_time(tmp_path, monkeypatch):
    """The start-up of a run (Ray, placement, engines, ranks) and a long generation update nothing; the ticker
    redraws the bar so its elapsed time and phase move. Off a terminal tqdm is disabled and no thread starts."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    tracker = Tracker(tmp_path, "exp", enabled_tensorboard=False, progress_total=3, summary_plot=False)
    try:
        tracker.set_phase("start-up")
        time.sleep(2.5)
        frames = terminal.getvalue().count("\r")
        assert "phase=start-up" in terminal.getvalue()
        assert frames >= 3, terminal.getvalue()  # the first draw, the phase, and the ticker's redraws
    finally:
        tracker.close()
    assert not tracker._ticker.is_alive()
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    quiet = Tracker(tmp_path, "exp2", enabled_tensorboard=False, progress_total=3, summary_plot=False)
    assert quiet._ticker is None
    quiet.close()

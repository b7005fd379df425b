"""The tracker choice: W&B (offline mode, no network) next to TensorBoard, the run id kept across a resume, and no
``wandb`` import unless a run asks for it."""

import json
import subprocess
import sys
import textwrap

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.utils.metrics_file import read_metrics
from reasonrl.utils.tracking import Tracker
from reasonrl.utils.wandb_logger import RUN_ID_FILE


def offline_runs(run_dir):
    return sorted((run_dir / "wandb").glob("offline-run-*"))


def run_log_bytes(offline_run):
    """The bytes of the run's ``.wandb`` record log (protobuf records: names and JSON values are stored as text)."""
    (log,) = offline_run.glob("run-*.wandb")
    return log.read_bytes()


def test_both_logs_tensorboard_jsonl_and_an_offline_wandb_run(wandb_offline):
    config = {"exp_name": "wb", "actor_lr": 0.000123, "advantage_estimator": "grpo"}
    with Tracker(
        wandb_offline / "logs", "wb", progress_bar=False, tracker="both", wandb_project="proj", run_config=config
    ) as tracker:
        for step in range(1, 4):
            tracker.log_metrics(
                step, {"reward/mean": step / 10, "policy/kl_marker": 0.5 * step, "eval/x": float("nan")}
            )
        run_dir = tracker.run_dir
    assert [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert list(run_dir.glob("events.out.tfevents.*")), "tracker=both also writes TensorBoard"
    (offline,) = offline_runs(run_dir)
    run_id = (run_dir / RUN_ID_FILE).read_text().strip()
    assert offline.name.endswith(f"-{run_id}") and run_id.startswith("wb-")
    data = run_log_bytes(offline)
    assert b"policy/kl_marker" in data and b"reward/mean" in data  # the history
    assert b"eval/x" not in data  # a non-finite value is null in metrics.jsonl and left out of W&B
    assert b"actor_lr" in data and b"0.000123" in data and b"proj" in data  # the config, once, and the project


def test_wandb_alone_writes_no_tensorboard_and_resume_continues_the_same_run(wandb_offline):
    logs = wandb_offline / "logs"
    with Tracker(logs, "solo", progress_bar=False, tracker="wandb", wandb_run_name="first name") as tracker:
        tracker.log_metrics(1, {"reward/mean": 0.1})
        run_dir = tracker.run_dir
    assert not list(run_dir.glob("events.out.tfevents.*"))
    first_id = (run_dir / RUN_ID_FILE).read_text().strip()
    assert b"first name" in run_log_bytes(offline_runs(run_dir)[0])

    with Tracker(logs, "solo", progress_bar=False, tracker="wandb", start_step=2) as tracker:  # a resumed session
        tracker.log_metrics(2, {"reward/mean": 0.2})
    assert (run_dir / RUN_ID_FILE).read_text().strip() == first_id
    # both sessions wrote to the same W&B run; its offline folders are offline-run-<time>-<id>, plus "-1" when the
    # two sessions started within the same second
    assert len(offline_runs(run_dir)) == 2 and all(f"-{first_id}" in run.name for run in offline_runs(run_dir))

    with Tracker(logs, "solo", progress_bar=False, tracker="wandb") as tracker:  # a fresh start: a new W&B run
        tracker.log_metrics(1, {"reward/mean": 0.3})
    assert (run_dir / RUN_ID_FILE).read_text().strip() != first_id


def test_unknown_tracker_is_refused_with_a_close_match(tmp_path):
    with pytest.raises(ValueError, match="tensorboard, wandb, both"):
        Tracker(tmp_path, "x", progress_bar=False, tracker="wandbb")
    with pytest.raises(ConfigError, match=r"tracker='wandbb' is unknown.*did you mean 'wandb'"):
        BasePPOExpConfig(tracker="wandbb").validate()


def test_tensorboard_never_imports_wandb(tmp_path):
    script = textwrap.dedent(
        f"""
        import json, sys
        import reasonrl.exp, reasonrl.loop.trainer
        from reasonrl.utils.tracking import Tracker
        with Tracker({str(tmp_path)!r}, "tb", progress_bar=True, tracker="tensorboard") as tracker:
            tracker.set_phase("generate")
            tracker.log_metrics(1, {{"reward/mean": 0.5}})
            tracker.advance(1, {{"reward": 0.5}})
        print(json.dumps(sorted(m for m in sys.modules if m == "wandb" or m.startswith("wandb."))))
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert read_metrics(tmp_path / "tb" / "metrics.jsonl")[0]["reward/mean"] == 0.5

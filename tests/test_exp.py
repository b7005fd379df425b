"""``BasePPOExp.run()``, driven by ``ExperimentRunner``: every user hook is called and checked before Ray starts;
the scorer is built once, is the one the trainer gets, and is closed on every exit path; an unguarded script fails
fast with the reason.

Nothing here starts Ray: ``init_ray`` is replaced by a function that fails the test, so old code that reached Ray
before checking the hooks fails at once instead of starting the stack.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.exp import BasePPOExp
from reasonrl.run.exp_hooks import HookError
from reasonrl.run.lifecycle import ExperimentRunner

REPO = Path(__file__).resolve().parents[1]
ROWS = [{"id": f"r{i}", "question": f"{i}+1=", "answer": str(i + 1)} for i in range(8)]


@pytest.fixture
def no_ray(monkeypatch):
    """Fails the test if the run tries to start or join Ray. (The test session's own Ray instance may be running:
    what is checked is that this run never calls ``ray.init`` / ``init_ray``.)"""
    import reasonrl.distributed.ray_cluster as ray_cluster

    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started before the hooks were checked")

    monkeypatch.setattr(ray_cluster, "init_ray", refuse)
    monkeypatch.setattr(ray, "init", refuse)
    yield


def config(tmp_path) -> TinyGRPOCPUConfig:
    return TinyGRPOCPUConfig(ckpt_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), eval_data=())


class GoodRows(BasePPOExp):
    def load_train_rows(self):
        return ROWS


class NoScorer(GoodRows):
    def build_scorer(self):
        return None


class NoRows(BasePPOExp):
    def load_train_rows(self):
        return []


class WrongField(BasePPOExp):
    def load_train_rows(self):
        return [{"id": "p0", "prompt": "1+1=", "answer": "2"}] * 8  # the chat template needs 'question'


@pytest.mark.parametrize(
    "exp_cls,message",
    [
        (NoScorer, r"NoScorer.build_scorer\(\) returned None: it must return a callable scorer\(completions, rows\)"),
        (NoRows, r"NoRows.load_train_rows\(\) returned an empty list: it must return a non-empty list of dict rows"),
        (WrongField, r"WrongField.build_template\(\): the template cannot render the first row of .* 'question'"),
    ],
    ids=["scorer-none", "no-rows", "template-fails"],
)
def test_bad_hooks_fail_before_ray(no_ray, tmp_path, exp_cls, message):
    with pytest.raises(HookError, match=message):
        exp_cls(config(tmp_path)).run()


class Scorer:
    def __init__(self):
        self.closed = 0

    def __call__(self, completions, rows):
        return []

    def close(self):
        self.closed += 1


def test_the_scorer_is_built_once_handed_on_and_closed(no_ray, tmp_path, monkeypatch):
    built: list[Scorer] = []
    handed: list = []

    class MyExp(GoodRows):
        def build_scorer(self):
            built.append(Scorer())
            return built[-1]

    def start(self, stack, inputs):  # stands in for Ray, workers and engines: the start-up fails
        handed.append(inputs)
        raise RuntimeError("start-up failed")

    monkeypatch.setattr(ExperimentRunner, "start", start)
    with pytest.raises(RuntimeError, match="start-up failed"):
        MyExp(config(tmp_path)).run()
    assert len(built) == 1 and handed[0].scorer is built[0]  # the trainer gets the scorer the check saw
    assert handed[0].train_rows == ROWS and built[0].closed == 1  # closed although start-up failed


UNGUARDED_TRAINING = """
import os, sys
with open(os.environ["RUNS_FILE"], "a") as f:
    f.write(f"{os.getpid()}\\n")
from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.exp import BasePPOExp
from reasonrl.rewards.scorers import MathScorer

class MyExp(BasePPOExp):
    def load_train_rows(self):
        return [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(8)]

    def build_scorer(self):
        return MathScorer(self.cfg)  # reward worker processes: they re-run this script

cfg = TinyGRPOCPUConfig(eval_data=(), verify_workers=2, ckpt_dir="ckpt", log_dir="logs")
try:
    MyExp(cfg).run()
finally:
    import ray
    print("ray initialized:", ray.is_initialized(), flush=True)
"""


def test_damaged_checkpoints_refuse_resume_auto_and_resume_none_sets_them_aside(no_ray, tmp_path):
    """Never a silent restart from zero: resume=auto over checkpoints that are all damaged is refused before Ray
    (naming what was found and the choices); resume=none starts afresh on purpose, setting the old run aside."""
    from reasonrl.config import ConfigError
    from reasonrl.utils.checkpoint import CheckpointManager

    cfg = config(tmp_path)
    manager = CheckpointManager(tmp_path / "ckpt" / cfg.exp_name, keep_last=1)
    with manager.staging(2) as tmp:
        (tmp / "trainer_state.json").write_text('{"global_step": 2}')
    (manager.path_for(2) / "trainer_state.json").write_text("{")
    with pytest.raises(ConfigError, match=r"(?s)resume refused.*step_2 \(moved aside to step_2\.damaged-.*resume=none"):
        ExperimentRunner(BasePPOExp(cfg)).resume_checkpoint()
    with manager.staging(1) as tmp:  # a complete checkpoint of the old run, from before the damage
        (tmp / "trainer_state.json").write_text('{"global_step": 1}')
    fresh = ExperimentRunner(BasePPOExp(dataclasses.replace(cfg, resume="none")))
    assert fresh.resume_checkpoint() is None
    assert sorted(p.name.split("-")[0] for p in manager.root.iterdir()) == ["step_1.superseded", "step_2.damaged"]


def test_an_unguarded_training_script_fails_before_ray_and_says_why(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(UNGUARDED_TRAINING))
    runs = tmp_path / "runs.txt"
    env = {
        **os.environ,
        "RUNS_FILE": str(runs),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    out = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert out.returncode != 0
    assert "ray initialized: False" in out.stdout
    assert "UnguardedMainError" in out.stderr and f"re-run the script {script}" in out.stderr, out.stderr[-3000:]
    assert 'if __name__ == "__main__":' in out.stderr
    assert "calls MyExp.run() at import time" in out.stderr  # the workers stopped at the top of run()
    assert len(runs.read_text().split()) <= 3  # the parent, and each of the 2 workers once: no retries


def test_a_ray_cluster_error_is_raised_as_the_config_error_on_ray_address():
    """distributed/ has its own error type (it does not import config/); the entry points report it as a ConfigError."""
    from reasonrl.config import ConfigError
    from reasonrl.distributed.ray_cluster import RayClusterError
    from reasonrl.run.launch import ray_cluster_checked

    with pytest.raises(ConfigError, match=r"no Ray cluster: 1 problem:\n  - ray_address='x:1': nothing there") as info:
        with ray_cluster_checked():
            raise RayClusterError("ray_address='x:1': nothing there", title="no Ray cluster")
    assert info.value.problems == ["ray_address='x:1': nothing there"]

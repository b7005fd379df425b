"""Ctrl-C and SIGTERM stop a real run (``python -m playground.tiny_grpo_cpu``) within seconds, save when asked,
shut everything down (no process started by the run outlives it, nothing left in /dev/shm), exit non-zero, and
the run resumes from the checkpoint written on the way out. A killed engine or DeepSpeed rank is restarted in the
same process and the run ends as an uninterrupted one. The tiny recipe's reward (digit fraction) changes the
weights every step, so equal metrics are not trivially equal. Each process start costs ~20 s, so scenarios share
runs: the resume from a damaged checkpoint is also the run whose engine and policy rank are killed.

Every process the run starts is found by a tag in its environment (Ray workers, raylet, GCS, agents, vLLM and the
reward workers all inherit the driver's environment), so other Ray instances on the machine do not disturb it.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fixtures.own_processes import shm_entries, tagged_pids, wait_for_own_new_shm

from reasonrl.utils.metrics_file import metrics_by_step, read_metrics
from reasonrl.utils.scalars import RUN_TO_RUN_PREFIXES

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[1]
TAG = "REASONRL_TEST_RUN_TAG"


def logged_steps(run_dir: Path) -> list[int]:
    rows = metrics_by_step(read_metrics(run_dir / "metrics.jsonl"))
    return [step for step, row in rows.items() if "reward/mean" in row]


def start(tmp_path: Path, *overrides: str) -> tuple[subprocess.Popen, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex
    env = dict(os.environ, **{TAG: tag, "PYTHONUNBUFFERED": "1", "REASONRL_REAPER_LOG": str(tmp_path / "reaper.log")})
    args = [
        f"ckpt_dir={tmp_path / 'ckpt'}",
        f"log_dir={tmp_path / 'logs'}",
        "exp_name=stop",
        "max_steps=7",
        "eval_before_training=false",
        "eval_interval=0",
        "eval_data=",
        "save_interval=0",
        "progress_bar=false",
        *overrides,
    ]
    log = open(tmp_path / f"driver-{tag[:6]}.log", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "playground.tiny_grpo_cpu", *args], cwd=REPO, env=env, stdout=log, stderr=log
    )
    return proc, tag


def wait_for_step(proc: subprocess.Popen, run_dir: Path, step: int, timeout: float = 420) -> None:
    deadline = time.monotonic() + timeout
    while step not in logged_steps(run_dir):
        assert proc.poll() is None, f"the run ended early with {proc.returncode}"
        assert time.monotonic() < deadline, f"step {step} not logged in {timeout}s"
        time.sleep(0.2)


def run_pids(tag: str) -> set[int]:
    return tagged_pids(TAG, tag)


def assert_nothing_left(tag: str, shm_before: set[str], grace: float = 30.0) -> None:
    """No process of the run is alive and /dev/shm holds nothing new of ours (another pytest-xdist worker's runs
    may hold entries meanwhile: tests/fixtures/own_processes.py)."""
    deadline = time.monotonic() + grace
    while run_pids(tag) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = run_pids(tag)
    names = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:80] for pid in left if Path(f"/proc/{pid}").exists()}
    assert not left, f"processes of the stopped run still alive after {grace}s: {names}"
    leaked = wait_for_own_new_shm(shm_before)
    assert not leaked, f"/dev/shm entries left: {leaked}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, dict]:
    """The metrics of an uninterrupted 7-step run (the same config as every scenario below); a clean exit leaves no
    process of the run (Ray's, vLLM's, the reward workers') and nothing in /dev/shm behind."""
    root = tmp_path_factory.mktemp("reference")
    shm_before = shm_entries()
    proc, tag = start(root)
    assert proc.wait(timeout=600) == 0
    assert_nothing_left(tag, shm_before)
    return deterministic_rows(root / "logs" / "stop")


def assert_same_metrics(want: dict[int, dict], got: dict[int, dict]) -> None:
    """Equal by construction, on any CPU: every run here is the same recipe on this machine with the same
    environment (bundles, OpenMP threads, kernels), and a resumed step replays the uninterrupted run's computations in
    the same shapes: the same prompts and seeds (sampler and RNG state restored), all of a step's requests added to
    an idle engine at once (the same engine batches), the same micro-batches on the same ranks (deterministic gloo
    reductions). What differs from run to run is left out (``RUN_TO_RUN_PREFIXES``: timings, and the float noise
    between the engine's and the trainer's kernels). rel 1e-6 is slack, not noise: a resume that changes anything
    (a sample, the LR, an optimizer moment) moves these metrics by far more, as the weights change every step."""
    assert sorted(got) == sorted(want)
    for step in want:
        assert want[step].keys() == got[step].keys(), step
        diffs = {
            k: (want[step][k], got[step][k])
            for k in want[step]
            if not math.isclose(want[step][k], got[step][k], rel_tol=1e-6, abs_tol=1e-9)
        }
        assert not diffs, f"step {step} differs from the uninterrupted run: {diffs}"


def complete_checkpoints(ckpt: Path) -> list[str]:
    return sorted((p.name for p in ckpt.glob("step_*") if (p / "COMPLETE").exists()), key=lambda n: int(n[5:]))


def test_sigterm_kill_9_damaged_checkpoint_and_killed_actors_then_the_run_matches(tmp_path, reference):
    """SIGTERM after step 1 saves and exits 143; a resumed run (saving every step) SIGKILLed once it has two complete
    checkpoints leaves no process behind (the reaper ends Ray's agents, which outlive a killed driver otherwise);
    the newest checkpoint is then damaged (bytes cut after it committed): the next resume sets it aside and falls
    back to the one before. In that run the vLLM engine is killed (kill -9) after its first saved step and a
    DeepSpeed policy rank after the next: it restarts its actors, resumes from its newest checkpoint in the same
    process, and ends with the metrics of an uninterrupted run."""
    shm_before = shm_entries()
    run_dir = tmp_path / "logs" / "stop"
    ckpt = tmp_path / "ckpt" / "stop"
    proc, tag = start(tmp_path)
    wait_for_step(proc, run_dir, 1)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)  # lands in step 2 (generation, forward or update)
    code = proc.wait(timeout=120)
    stopped_in = time.monotonic() - sent
    assert code == 128 + signal.SIGTERM
    assert_nothing_left(tag, shm_before)
    saved = sorted(p.name for p in ckpt.glob("step_*"))
    assert saved and saved[-1] in ("step_1", "step_2"), saved  # the last completed step, saved on the way out
    print(f"SIGTERM: exit {code} {stopped_in:.1f}s after the signal; saved {saved[-1]}")
    # resume, saving every step, then kill -9 the driver: nothing it started may outlive it
    resumed, tag2 = start(tmp_path, "save_interval=1", "keep_last_ckpts=3")
    deadline = time.monotonic() + 420
    while len(complete_checkpoints(ckpt)) < 3:  # SIGTERM's and two of the resumed run's
        assert resumed.poll() is None, f"the resumed run ended early with {resumed.returncode}"
        assert time.monotonic() < deadline, f"no third checkpoint in 420s: {complete_checkpoints(ckpt)}"
        time.sleep(0.1)
    resumed.kill()
    resumed.wait(timeout=30)
    assert_nothing_left(tag2, shm_before)
    *_, before_newest, newest = complete_checkpoints(ckpt)
    resume_step = int(before_newest[5:])
    assert resume_step <= 4, f"the run went too far before it was killed: {complete_checkpoints(ckpt)}"
    state = ckpt / newest / "trainer_state.json"
    state.write_bytes(state.read_bytes()[:-5])
    # resume=auto: the damaged newest is set aside, the run resumes from the one before, loses two actors, finishes
    final, tag3 = start(tmp_path, "save_interval=1", "keep_last_ckpts=2", "max_restarts=2")
    wait_for_checkpoint(final, ckpt, resume_step + 1, after=newest)
    kill_actor(tag3, "VLLMEngine")
    wait_for_checkpoint(final, ckpt, resume_step + 2, after=newest)
    kill_actor(tag3, "PolicyWorker")
    assert final.wait(timeout=600) == 0
    assert_nothing_left(tag3, shm_before)
    assert list(ckpt.glob(f"{newest}.damaged-*")), sorted(p.name for p in ckpt.iterdir())
    assert (ckpt / "step_7" / "COMPLETE").exists()
    log = (tmp_path / f"driver-{tag3[:6]}.log").read_text()
    assert log.count("a worker died") == 2, "expected two restarts"
    assert_same_metrics(reference, deterministic_rows(run_dir))


def wait_for_checkpoint(proc: subprocess.Popen, ckpt: Path, step: int, after: str, timeout: float = 420) -> None:
    """Until the run has set ``after`` aside as damaged and then completed ``step_<step>`` (a resumed run re-logs
    steps an earlier run logged, so its metrics cannot tell; the damaged checkpoint may be ``step_<step>`` itself)."""
    deadline = time.monotonic() + timeout
    while not (list(ckpt.glob(f"{after}.damaged-*")) and (ckpt / f"step_{step}" / "COMPLETE").exists()):
        assert proc.poll() is None, f"the run ended early with {proc.returncode}"
        assert time.monotonic() < deadline, f"step_{step} not saved in {timeout}s"
        time.sleep(0.1)


def test_ctrl_c_once_saves_then_the_resumed_run_stopped_by_ctrl_c_twice_stops_at_once(tmp_path):
    """One Ctrl-C finishes the phase, saves the last completed step (save_on_interrupt=true) and exits 130; the run
    resumed from that checkpoint, stopped by two Ctrl-C without saving, exits 130 at once and writes nothing."""
    shm_before = shm_entries()
    run_dir = tmp_path / "logs" / "stop"
    proc, tag = start(tmp_path, "save_on_interrupt=true")
    wait_for_step(proc, run_dir, 1)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=120)
    stopped_in = time.monotonic() - sent
    assert code == 130
    assert_nothing_left(tag, shm_before)
    steps = logged_steps(run_dir)
    saved = sorted(p.name for p in (tmp_path / "ckpt" / "stop").glob("step_*"))
    assert saved == [f"step_{steps[-1]}"]  # the last completed (logged) step, nothing later
    print(f"Ctrl-C once: exit {code} {stopped_in:.1f}s after the signal; saved {saved[-1]}")

    resumed, tag2 = start(tmp_path, "save_on_interrupt=false")
    wait_for_step(resumed, run_dir, steps[-1] + 1)  # resumed from the checkpoint, then trained one more step
    sent = time.monotonic()
    resumed.send_signal(signal.SIGINT)
    time.sleep(0.5)
    resumed.send_signal(signal.SIGINT)
    code = resumed.wait(timeout=120)
    stopped_in = time.monotonic() - sent
    assert code == 130
    assert_nothing_left(tag2, shm_before)
    assert sorted(p.name for p in (tmp_path / "ckpt" / "stop").glob("step_*")) == saved  # no save asked, none written
    print(f"Ctrl-C twice: exit {code} {stopped_in:.1f}s after the first signal")


def kill_actor(tag: str, actor: str) -> int:
    """SIGKILL the first process of the tagged run whose title is ``ray::<actor>`` (an OOM kill looks the same)."""
    for pid in sorted(run_pids(tag)):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(f"ray::{actor}".encode()):
            os.kill(pid, signal.SIGKILL)
            return pid
    raise AssertionError(f"no ray::{actor} process in the run")


def deterministic_rows(run_dir: Path) -> dict[int, dict]:
    rows = metrics_by_step(read_metrics(run_dir / "metrics.jsonl"))
    return {step: {k: v for k, v in row.items() if not k.startswith(RUN_TO_RUN_PREFIXES)} for step, row in rows.items()}

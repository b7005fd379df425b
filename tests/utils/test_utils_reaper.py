"""The reaper ends every process a run marked once the driver is gone, and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reasonrl.utils.reaper import RUN_ID_VAR, marked_pids, watch

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="the reaper reads /proc (Linux only)")


def _sleeper(run_id: str | None, ignore_term: bool = False) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(RUN_ID_VAR, None)
    if run_id:
        env[RUN_ID_VAR] = run_id
    code = "import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_term else "")
    return subprocess.Popen([sys.executable, "-c", code + "time.sleep(60)"], env=env)


def test_marked_processes_end_when_the_driver_ends_and_others_stay():
    run_id = "test-run-" + str(os.getpid())
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    marked, stubborn, other = _sleeper(run_id), _sleeper(run_id, ignore_term=True), _sleeper(None)
    try:
        time.sleep(0.3)  # the children are up and their environment readable
        assert sorted(marked_pids(run_id)) == sorted([marked.pid, stubborn.pid])
        start = time.monotonic()
        assert watch(driver.pid, run_id) == 2  # returns once the driver is gone and the marked ones are ended
        elapsed = time.monotonic() - start
        assert marked.wait(timeout=5) is not None and stubborn.wait(timeout=5) is not None  # SIGTERM, then SIGKILL
        assert other.poll() is None  # an unmarked process is left alone
        assert elapsed < 10
    finally:
        for p in (driver, marked, stubborn, other):
            p.kill()
            p.wait()


def test_an_unmarked_orphan_of_the_driver_is_ended_and_a_reaper_is_spared():
    """Ray's processes sometimes lose the mark (setproctitle zeroes the start of /proc/<pid>/environ): the recorded
    process tree still finds them after the driver is gone, even once they are orphans."""
    run_id = "test-run-tree-" + str(os.getpid())
    env = {k: v for k, v in os.environ.items() if k != RUN_ID_VAR}
    spawn = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "peer = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', 'reasonrl.utils.reaper'])\n"
        "print(child.pid, peer.pid, flush=True)\n"
        "time.sleep(1.5)\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", spawn], env=env, stdout=subprocess.PIPE, text=True)
    child_pid, peer_pid = map(int, driver.stdout.readline().split())
    try:
        assert watch(driver.pid, run_id) == 1  # the orphan (its parent, the driver, exited first)
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child_pid}").exists() and _is_live(child_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _is_live(child_pid)
        assert _is_live(peer_pid)  # another run's watcher is never ended by this one
    finally:
        driver.wait()
        for pid in (child_pid, peer_pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def _is_live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"

"""Nothing a run starts outlives it, even when the driver is killed with SIGKILL.

A local Ray instance's helper processes (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) notice a dead raylet,
then block on a call to the (also dead) GCS and never exit; a killed driver cannot clean up after itself. So
:func:`start_reaper` starts a tiny watcher in its own session that knows the run's processes two ways:

* **the process tree**: while the driver lives, the watcher records every descendant of the driver (pid and start
  time, every ``TREE_POLL_S``); orphans keep their recorded identity after their parent dies;
* **a mark in the environment**: ``REASONRL_RUN_ID=<uuid>`` is put into the driver's environment, and Ray's GCS,
  raylet, agents and workers, vLLM and the reward workers inherit it. A mark alone is not enough: Ray's processes
  set their title with ``setproctitle``, which zeroes the first few hundred bytes of ``/proc/<pid>/environ``, and
  the order of variables there is Ray's, so the mark is sometimes among the zeroed bytes.

When the driver is gone, for whatever reason, the watcher sends SIGTERM to every live process it knows (a pid
counts only while its start time matches the recorded one, so a reused pid is never hit), then SIGKILL to those
still alive after a grace period, and exits. Linux only (it reads ``/proc``).

    python -m reasonrl.utils.reaper <driver pid> <run id>      # what start_reaper runs; stdlib only, ~30 ms
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

RUN_ID_VAR = "REASONRL_RUN_ID"
TREE_POLL_S = 0.5
GRACE_S = 3.0
SETTLE_S = 20.0


def start_reaper() -> str | None:
    """Mark this process's future children with a run id and start the watcher. Returns the run id (None where
    ``/proc`` is missing). Idempotent within one process: a second call reuses the first run id and watcher."""
    if not os.path.isdir("/proc"):
        return None
    if os.environ.get(RUN_ID_VAR) and os.environ.get(f"{RUN_ID_VAR}_OWNER") == str(os.getpid()):
        return os.environ[RUN_ID_VAR]
    run_id = uuid.uuid4().hex
    os.environ[RUN_ID_VAR] = run_id
    os.environ[f"{RUN_ID_VAR}_OWNER"] = str(os.getpid())
    env = {k: v for k, v in os.environ.items() if k not in (RUN_ID_VAR, f"{RUN_ID_VAR}_OWNER")}
    subprocess.Popen(
        [sys.executable, "-m", "reasonrl.utils.reaper", str(os.getpid()), run_id],
        env=env,
        start_new_session=True,  # a Ctrl-C to the driver's terminal does not reach it
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    return run_id


def marked_pids(run_id: str) -> list[int]:
    """Live processes (other than this one) whose environment holds ``REASONRL_RUN_ID=run_id``."""
    return pids_with_env(RUN_ID_VAR, run_id)


def pids_with_env(variable: str, value: str) -> list[int]:
    """Live processes (other than this one) whose environment holds ``variable=value``."""
    needle = f"{variable}={value}".encode()
    me, out = os.getpid(), []
    for pid in live_pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.append(pid)
        except OSError:  # exited meanwhile, or not readable
            continue
    return out


def descendants(*roots: int) -> dict[int, str]:
    """Every live descendant of ``roots`` (children, their children, ...) as ``{pid: start time}``; one scan of
    ``/proc`` whatever the number of roots."""
    children: dict[int, list[int]] = {}
    started: dict[int, str] = {}
    for pid in live_pids():
        stat = _stat(pid)
        if stat is None:
            continue
        children.setdefault(int(stat[1]), []).append(pid)  # field 4: parent pid
        started[pid] = stat[19].decode()  # field 22: start time in clock ticks since boot
    out: dict[int, str] = {}
    todo = [child for root in roots for child in children.get(root, [])]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out[pid] = started[pid]
            todo.extend(children.get(pid, []))
    return out


def live_pids() -> list[int]:
    """Every pid in ``/proc``."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _stat(pid: int) -> list[bytes] | None:
    """Fields 3.. of ``/proc/<pid>/stat``, or None when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    if len(fields) < 20 or fields[0] == b"Z":  # field 3: state
        return None
    return fields


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None when it is gone or a zombie."""
    stat = _stat(pid)
    return None if stat is None else stat[19].decode()


def _is_reaper(pid: int) -> bool:
    """Another run's watcher (a child driver's): it has its own driver to outlive, never ours to end."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"reasonrl.utils.reaper" in f.read()
    except OSError:
        return False


def watch(driver_pid: int, run_id: str) -> int:
    """Wait for ``driver_pid`` to end, then end every process it started (recorded in its tree, or marked with
    ``run_id``). Returns how many it signalled."""
    me = os.getpid()
    known: dict[int, str] = {}  # every descendant ever seen: pid -> start time
    born = _start_time(driver_pid)
    while born is not None and _start_time(driver_pid) == born:  # same pid and start time: the driver still runs
        known.update(descendants(driver_pid))
        time.sleep(TREE_POLL_S)

    def alive() -> list[int]:
        """The run's live processes: recorded ones (same start time), marked ones, and their descendants."""
        pids = {pid for pid, start in known.items() if _start_time(pid) == start}
        pids.update(marked_pids(run_id))
        children = descendants(*pids)
        known.update(children)
        pids.update(children)
        return [pid for pid in pids if pid != me and not _is_reaper(pid)]

    found = set(left := alive())
    for pid in left:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = alive()
    # A process being stopped may start others on its way out (a raylet restarting its agents): kill until two
    # scans in a row find nothing, for at most SETTLE_S.
    quiet, deadline = 0, time.monotonic() + SETTLE_S
    while quiet < 2 and time.monotonic() < deadline:
        left = alive()
        found.update(left)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        quiet = 0 if left else quiet + 1
        time.sleep(0.2)
    return len(found)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


if __name__ == "__main__":
    ended = watch(int(sys.argv[1]), sys.argv[2])
    if os.environ.get("REASONRL_REAPER_LOG"):  # for tests: what the watcher did
        with open(os.environ["REASONRL_REAPER_LOG"], "a") as log:
            log.write(f"driver {sys.argv[1]} gone; ended {ended} process(es) of run {sys.argv[2]}\n")

"""The trusted side of the sandbox: start contained interpreters, feed them a job, read their capped output, kill
them at the deadline. Stdlib only; never imports, execs or evals a program (see ``harness.py`` for the inside).

    sandbox = Sandbox(SandboxLimits(timeout_s=10, test_timeout_s=4), workers=2)
    results = sandbox.run_many([Job(program, "stdio", inputs=["1 2\\n"]), ...], deadline_s=60)
    results[0].status, results[0].tests[0]["s"], results[0].tests[0]["o"]

Every job is one ``python -I -S harness.py`` process started with an empty environment (``PATH`` and ``LANG``
only) in ``/``, in a session of its own. Up to ``workers`` run at once; a single-threaded selector loop writes
their jobs, reads their result pipes (JSON lines, parsed with ``json`` only), keeps the first bytes of their
stdout/stderr and drops the rest, and kills a whole session at its deadline (in namespace mode the pid namespace
dies with it, so no process the program started survives).
"""

from __future__ import annotations

import json
import marshal
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

HARNESS = str(Path(__file__).with_name("harness.py"))
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
GRACE_S = 0.5  # the parent's kill comes this long after the harness's own program deadline
_KEEP_BYTES = 8192  # of the launcher's stdout / stderr (tests' own output goes through the result pipe)
MODES = ("stdio", "call", "check")


@dataclass(frozen=True)
class SandboxLimits:
    """Limits of one program.

    Attributes:
        timeout_s: wall-clock limit of the whole program (all its tests); the parent kills it ``GRACE_S`` later.
        test_timeout_s: wall-clock limit of one test (its CPU limit is the same, rounded up, plus 1 s hard).
        memory_mb: address space of each process (``RLIMIT_AS``); a memory bomb gets ``MemoryError``.
        nproc: processes and threads the program may have at once (``RLIMIT_NPROC``; counted inside its user
            namespace, or over the whole uid without one).
        output_bytes: size of any file it writes, its stdout included (``RLIMIT_FSIZE``); more kills the test.
        nofile: open files per process (``RLIMIT_NOFILE``).
        tmpfs_mb: size of its fresh /tmp (the working directory) in namespace mode.
        isolate: ``auto`` (namespaces where the kernel allows them, else the fallback), ``ns`` (required: a job
            fails with ``error`` where they are refused) or ``none`` (the fallback, see docs/rewards_and_data.md).
    """

    timeout_s: float = 10.0
    test_timeout_s: float = 4.0
    memory_mb: int = 512
    nproc: int = 16
    output_bytes: int = 1 << 20
    nofile: int = 64
    tmpfs_mb: int = 64
    isolate: str = "auto"

    def __post_init__(self):
        if self.isolate not in ("auto", "ns", "none"):
            raise ValueError(f"isolate must be auto, ns or none, got {self.isolate!r}")
        if self.timeout_s <= 0 or self.test_timeout_s <= 0:
            raise ValueError("timeouts must be > 0")


@dataclass
class Job:
    """One program and its test inputs. ``mode``: ``stdio`` (``inputs`` are stdin texts), ``call`` (``inputs``
    are argument lists of ``fn_name``) or ``check`` (``check`` defines ``check(candidate)``, called with the
    program's ``entry_point``; ``prompt``, trusted text such as the task's prompt, runs before it in the check's
    namespace, for the helpers a check calls; nothing of the program is in that namespace). Expected outputs never
    go in a job."""

    program: str
    mode: str
    inputs: Sequence = ()
    fn_name: str | None = None
    check: str | None = None
    entry_point: str | None = None
    prompt: str | None = None
    limits: SandboxLimits | None = None


@dataclass
class RunResult:
    """What a job did. ``status``: ``ok`` (the harness ran every test it had time for and said so), ``timeout``
    (killed at the program or batch deadline), ``killed`` (died otherwise, e.g. its result stream over the cap) or
    ``error`` (the sandbox itself failed: ``detail`` says why). ``tests``: per test, ``s`` in ok / error / wrong
    (check mode) / timeout / killed, ``o`` the output or serialised return value, ``e`` the stderr tail, ``t``
    seconds. ``isolated``: whether namespaces were used."""

    status: str
    tests: list[dict] = field(default_factory=list)
    isolated: bool | None = None
    elapsed_s: float = 0.0
    detail: str = ""
    stderr: str = ""


class _Running:
    def __init__(self, index: int, job: Job, limits: SandboxLimits, python: str):
        self.index = index
        self.limits = limits
        self.start = time.monotonic()
        self.deadline = self.start + limits.timeout_s + GRACE_S
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [python, "-I", "-S", HARNESS, str(os.getpid()), str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
                env=ENV,
                cwd="/",
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self.result_fd = read_fd
        os.set_blocking(read_fd, False)
        header = {
            "mode": job.mode,
            "program": job.program,
            "inputs": list(job.inputs),
            "fn_name": job.fn_name,
            "entry_point": job.entry_point,
            "isolate": limits.isolate,
            "limits": asdict(limits),
        }
        # marshal: plain values only, read by the harness before any program runs (the other way is JSON only)
        # check mode: the check and the prompt in a second message, read only after the candidate's process exists
        trusted = {"check": job.check or "", "prompt": job.prompt or ""}
        self.payload = _frame(marshal.dumps(header)) + (_frame(marshal.dumps(trusted)) if job.mode == "check" else b"")
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.buf = b""
        self.result_bytes = 0
        self.cap = (limits.output_bytes + 4096) * max(1, len(job.inputs)) * 2 + 65536
        self.lines: list[dict] = []
        self.kept = {"stdout": b"", "stderr": b""}
        self.open_fds = 3
        self.killed_for: str | None = None
        self.workdir: str | None = None

    def kill(self, why: str) -> None:
        if self.killed_for is None:
            self.killed_for = why
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the session: the launcher, H and whatever stayed in it
        except (ProcessLookupError, PermissionError):
            pass

    def take(self, data: bytes) -> None:
        self.result_bytes += len(data)
        if self.result_bytes > self.cap:
            self.kill(f"result stream over {self.cap} bytes")
            return
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                self.kill("unreadable result line")
                return
            if isinstance(msg, dict):
                self.lines.append(msg)
                if "workdir" in msg and isinstance(msg["workdir"], str):
                    self.workdir = msg["workdir"]

    def finish(self) -> RunResult:
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        ready = next((m for m in self.lines if "ready" in m), None)
        done = any("done" in m for m in self.lines)
        tests = [m for m in self.lines if "i" in m and "s" in m]
        if self.workdir and not done and self.workdir.startswith("/tmp/reasonrl-sandbox-"):
            shutil.rmtree(self.workdir, ignore_errors=True)  # fallback mode, killed before it cleaned up
        stderr = self.kept["stderr"].decode("utf-8", "replace")
        if done and self.killed_for is None:
            status, detail = "ok", ""
        elif self.killed_for is not None:
            status = "timeout" if "deadline" in self.killed_for else "killed"
            detail = self.killed_for
        elif ready is None:
            status, detail = "error", f"the sandbox did not start (exit {self.proc.returncode}): {stderr[-2000:]}"
        else:
            status, detail = "killed", f"the sandbox ended early (exit {self.proc.returncode})"
        return RunResult(
            status,
            tests,
            None if ready is None else bool(ready.get("ns")),
            time.monotonic() - self.start,
            detail,
            stderr,
        )


def _frame(data: bytes) -> bytes:
    return b"%010d" % len(data) + data


class Sandbox:
    """Runs jobs in contained interpreters, ``workers`` at a time (default: CPU count).

    ``python``: the interpreter to run (default ``sys.executable``; it runs with ``-I -S``, so the program sees
    the standard library only).
    """

    def __init__(self, limits: SandboxLimits | None = None, workers: int | None = None, python: str | None = None):
        self.limits = limits or SandboxLimits()
        self.workers = max(1, int(workers or os.cpu_count() or 1))
        self.python = python or sys.executable

    def run(self, job: Job) -> RunResult:
        return self.run_many([job])[0]

    def run_many(self, jobs: Sequence[Job], deadline_s: float | None = None) -> list[RunResult]:
        """Run every job, at most ``workers`` at once; one ``RunResult`` per job, in order. Past ``deadline_s``
        (seconds from now) running jobs are killed and jobs not started yet are not run: both come back as
        ``timeout`` with ``detail`` ``batch deadline``."""
        for job in jobs:
            if job.mode not in MODES:
                raise ValueError(f"mode must be one of {MODES}, got {job.mode!r}")
        batch_end = None if deadline_s is None else time.monotonic() + deadline_s
        results: list[RunResult | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        sel = selectors.DefaultSelector()
        running: dict[int, _Running] = {}
        try:
            while pending or running:
                now = time.monotonic()
                if batch_end is not None and now >= batch_end:
                    for r in running.values():
                        r.kill("batch deadline")
                    while pending:
                        results[pending.popleft()] = RunResult("timeout", detail="batch deadline")
                while pending and len(running) < self.workers:
                    i = pending.popleft()
                    self._launch(i, jobs[i], sel, running)
                timeout = min([r.deadline for r in running.values()] + ([batch_end] if batch_end else []), default=now)
                for key, events in sel.select(max(0.0, timeout - time.monotonic())):
                    self._on_event(key, events, sel, running, results)
                now = time.monotonic()
                for r in list(running.values()):
                    if now >= r.deadline:
                        r.kill("program deadline")
        finally:
            for r in running.values():
                r.kill("interrupted")
            for r in list(running.values()):
                self._close(r, sel, running, results)
            sel.close()
        return results  # type: ignore[return-value]

    def _launch(self, i: int, job: Job, sel, running) -> None:
        limits = job.limits or self.limits
        try:
            r = _Running(i, job, limits, self.python)
        except OSError as exc:
            raise RuntimeError(f"cannot start a sandbox with {self.python}: {exc}") from exc
        running[r.proc.pid] = r
        sel.register(r.result_fd, selectors.EVENT_READ, (r, "result"))
        sel.register(r.proc.stdout, selectors.EVENT_READ, (r, "stdout"))
        sel.register(r.proc.stderr, selectors.EVENT_READ, (r, "stderr"))
        sel.register(r.proc.stdin, selectors.EVENT_WRITE, (r, "stdin"))

    def _on_event(self, key, events, sel, running, results) -> None:
        r, kind = key.data
        if kind == "stdin":
            try:
                n = os.write(r.proc.stdin.fileno(), r.payload[:65536])
                r.payload = r.payload[n:]
            except BlockingIOError:
                return
            except OSError:  # the sandbox died before reading its job
                r.payload = b""
            if not r.payload:
                sel.unregister(r.proc.stdin)
                r.proc.stdin.close()
            return
        fd = key.fd
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            if kind == "result":
                r.take(data)
            else:
                r.kept[kind] += data[: max(0, _KEEP_BYTES - len(r.kept[kind]))]
            return
        sel.unregister(fd)
        r.open_fds -= 1
        if kind == "result":
            os.close(r.result_fd)
            r.result_fd = -1
        if r.open_fds == 0:
            self._close(r, sel, running, results)

    def _close(self, r: _Running, sel, running, results) -> None:
        for f in (r.proc.stdin, r.proc.stdout, r.proc.stderr, r.result_fd):
            try:
                sel.unregister(f)
            except (KeyError, ValueError):
                pass
        if r.result_fd >= 0:
            os.close(r.result_fd)
            r.result_fd = -1
        if r.open_fds:  # interrupted: the session is killed, stop reading
            r.kill("interrupted")
        running.pop(r.proc.pid, None)
        results[r.index] = r.finish()


_NS_AVAILABLE: bool | None = None


def namespaces_available(python: str | None = None) -> bool:
    """Whether programs run in namespaces here (a trivial job, once per process)."""
    global _NS_AVAILABLE
    if _NS_AVAILABLE is None:
        result = Sandbox(SandboxLimits(timeout_s=10), workers=1, python=python).run(Job("", "stdio", inputs=[""]))
        _NS_AVAILABLE = bool(result.isolated)
    return _NS_AVAILABLE

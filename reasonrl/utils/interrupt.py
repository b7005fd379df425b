"""Stopping a run on request: Ctrl-C (SIGINT) and SIGTERM (what a cluster scheduler sends before preemption).

    with StopSignals() as stop:        # installs the handlers in the main thread, restores the old ones on exit
        ... trainer checks stop.requested between phases ...

The first signal only records the request (``stop.requested`` becomes the signal number) and logs what will happen:
the trainer finishes or abandons the current phase, optionally saves, and the run ends with
:class:`TrainingInterrupted`. A second signal raises ``KeyboardInterrupt`` at once: the run stops where it is and
only the cleanups run (engines, workers, Ray). Entry points exit with ``128 + signal number`` (130 for Ctrl-C, 143 for
SIGTERM), as a shell does.
"""

from __future__ import annotations

import os
import signal
import threading
import time

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(KeyboardInterrupt):
    """The run stopped because of a signal. ``signum`` is the signal, ``saved`` the checkpoint written on the way out
    (None when none was written), ``step`` the last completed step."""

    def __init__(self, signum: int, step: int, saved=None):
        self.signum, self.step, self.saved = signum, step, saved
        name = signal.Signals(signum).name
        where = f"; checkpoint {saved}" if saved else "; no checkpoint written on the way out"
        super().__init__(f"stopped by {name} after step {step}{where}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopSignals:
    """Records the first SIGINT/SIGTERM as a stop request; the second one raises ``KeyboardInterrupt``.

    Outside the main thread (signal handlers can only be installed there) it installs nothing and never requests a
    stop, so a run started from a worker thread behaves as before.
    """

    def __init__(self, grace_hint: str = "finishing the current phase"):
        self.requested: int | None = None
        self.requested_at: float | None = None
        self.grace_hint = grace_hint
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        return self.install()

    def install(self) -> StopSignals:
        """Install (again) the handlers: call it after ``ray.init``, whose core worker replaces the SIGTERM handler
        with one that aborts the process. The handlers found at the first install are restored on exit."""
        if threading.current_thread() is threading.main_thread():
            for signum in SIGNALS:
                previous = signal.signal(signum, self._handle)
                self._previous.setdefault(signum, previous)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum, frame) -> None:
        # No logging here: the handler runs between two bytecodes of the main thread, which may hold the log
        # sink's lock. A direct write to stderr is safe; the trainer logs the request when it acts on it.
        name = signal.Signals(signum).name
        if self.requested is not None:
            _say(f"{name} again: stopping now (cleaning up engines, workers and Ray)")
            raise KeyboardInterrupt(f"stopped by a second signal ({name})")
        self.requested, self.requested_at = signum, time.monotonic()
        _say(f"{name} received: {self.grace_hint}, then stopping. Send it again to stop at once.")

    def describe(self) -> str:
        return "" if self.requested is None else signal.Signals(self.requested).name


def _say(text: str) -> None:
    try:
        os.write(2, f"\n[reasonrl] {text}\n".encode())
    except OSError:
        pass

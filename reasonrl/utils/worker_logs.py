"""Worker warnings and errors in the run's ``train.log``.

The driver's loguru lines go to ``<log_dir>/<exp_name>/train.log`` (a sink of :class:`reasonrl.utils.tracking.Tracker`);
Ray workers run in other processes, whose lines Ray only forwards to the driver's console. So the driver exports
the file's absolute path in :data:`LOG_FILE_ENV` before it starts its local Ray instance (:func:`exported_log_file`;
every worker process inherits it), and each worker calls :func:`install_worker_log_sink` when it starts: a loguru
sink that appends the worker's WARNING-and-above lines (with tracebacks) to that same file, each line prefixed with
the worker's name and pid::

    2026-01-01 12:00:00.000 | WARNING  | PolicyWorker rank 1 pid 4242 | reasonrl.distributed...:88 - <message>

Every process opens the file in append mode (``O_APPEND``): each line is one ``write``, so lines of several
processes never tear each other (a long multi-line traceback may interleave with another process's lines). A worker
of a Ray cluster joined by address does not inherit the driver's environment: export ``REASONRL_LOG_FILE`` on the
nodes yourself (a path on a shared filesystem), or read its lines in the driver's console / Ray's session logs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from loguru import logger

LOG_FILE_ENV = "REASONRL_LOG_FILE"
WORKER_LEVEL = "WARNING"
_FORMAT = "{{time:YYYY-MM-DD HH:mm:ss.SSS}} | {{level: <8}} | {worker} | {{name}}:{{line}} - {{message}}"
_installed: dict[str, int] = {}  # path -> loguru sink id, at most one sink per file and process


def install_worker_log_sink(worker: str, level: str = WORKER_LEVEL) -> int | None:
    """Append this process's loguru lines of ``level`` and above to the file named by ``REASONRL_LOG_FILE``, prefixed
    with ``worker`` (e.g. ``PolicyWorker rank 1``) and the pid. Returns the sink id; None when the variable is unset
    (a worker started outside a reasonrl run) or the sink already exists in this process."""
    path = os.environ.get(LOG_FILE_ENV, "").strip()
    if not path or path in _installed:
        return None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    prefix = f"{worker} pid {os.getpid()}".replace("{", "{{").replace("}", "}}")  # literal in loguru's format
    sink_id = logger.add(
        path,
        level=level,
        format=_FORMAT.format(worker=prefix),
        mode="a",
        delay=True,  # the file is created by the first line only: a quiet worker leaves no trace
        enqueue=False,  # written at once: a line logged just before the process dies is not lost in a queue
        catch=True,  # a full disk never breaks the worker
    )
    _installed[path] = sink_id
    return sink_id


@contextlib.contextmanager
def exported_log_file(path: str | Path) -> Iterator[Path]:
    """Set ``REASONRL_LOG_FILE`` to ``path`` (absolute) in this process for the ``with`` block (processes started
    in it, such as a local Ray instance and its workers, inherit it); the previous value is restored after."""
    path = Path(path).expanduser().resolve()
    previous = os.environ.get(LOG_FILE_ENV)
    os.environ[LOG_FILE_ENV] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(LOG_FILE_ENV, None)
        else:
            os.environ[LOG_FILE_ENV] = previous

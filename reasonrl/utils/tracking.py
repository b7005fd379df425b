"""Run logging: TensorBoard and/or W&B scalars, ``metrics.jsonl``, generation dumps, a compact loguru line and a
progress bar.

Layout of one run, ``<log_dir>/<exp_name>/`` (the TensorBoard event files sit directly in it, so
``tensorboard --logdir <log_dir>`` lists one run per experiment, named after it)::

    events.out.tfevents.*      TensorBoard scalars (one file per session; a resumed session purges steps >= start)
    metrics.jsonl              one JSON object per log_metrics() call: {"step", "time", <metric>: value | null}
    metrics.jsonl.bak          the previous metrics.jsonl, kept when a (re)start dropped rows from it
    generations/step_<n>.jsonl sampled generations of step n, one JSON object per sample
    config.txt                 the text given to log_table_at_start() (e.g. the config table)
    train.log                  every loguru message of this process while the tracker is open, plus the WARNING+
                               lines of Ray workers that installed reasonrl.utils.worker_logs' sink
    wandb/, wandb_run_id       tracker=wandb/both: the W&B run folder and its id (reasonrl.utils.wandb_logger)
    summary.png, summary.html  curves of metrics.jsonl, written by close() (see reasonrl.utils.plots)

Resume: a tracker built with ``start_step=s`` is the continuation of a run whose steps ``< s`` are kept. Rows with
``step >= s`` are dropped from ``metrics.jsonl``, ``generations/step_<n>.jsonl`` with ``n >= s`` are deleted, and
TensorBoard is told to hide events with ``step >= s`` (``SummaryWriter(purge_step=s)``), so the logs of a resumed
run equal those of an uninterrupted one. ``start_step=0`` starts the run's logs afresh: a non-empty
``<log_dir>/<exp_name>/`` left by an earlier run is first renamed to ``<exp_name>.prev-<YYYYmmdd-HHMMSS>`` (a
separate run in TensorBoard), never deleted.

The scalar names the trainer logs are listed, with their meaning, in :data:`reasonrl.utils.scalars.SCALARS`; the
``metrics.jsonl`` format and its readers are :mod:`reasonrl.utils.metrics_file`.
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.utils.metrics_file import (
    GENERATIONS_DIR,
    METRICS_FILE,
    RESERVED_KEYS,
    to_jsonable,
    to_number,
    truncate_from_step,
)
from reasonrl.utils.paths import move_aside
from reasonrl.utils.scalars import format_metrics_line, format_value

TRACKERS = ("tensorboard", "wandb", "both")
"""Where scalars go besides ``metrics.jsonl``: the ``tracker`` field of the RL and SFT configs is one of these."""


class Tracker:
    """Logs one run (see the module docstring for the files). Use as a context manager or call :meth:`close`.

    ``progress_total``: number of steps for the progress bar; ``progress_bar=True`` shows a ``tqdm.auto`` bar: a
    widget in Jupyter, on stderr when it is a terminal (it stays off in log files and Ray job output); the step's
    current phase (:meth:`set_phase`) shows next to it. ``log_file`` adds a loguru sink ``train.log`` for the
    lifetime of the tracker. ``summary_plot`` writes ``summary.png``/``summary.html`` on close.

    ``tracker``: ``tensorboard`` (default), ``wandb`` or ``both``; ``metrics.jsonl`` is always written. W&B
    (:mod:`reasonrl.utils.wandb_logger`) is imported only for ``wandb``/``both``: project ``wandb_project``, run
    name ``wandb_run_name`` (default ``exp_name``), ``run_config`` logged once as the run's config.
    ``enabled_tensorboard=False`` turns TensorBoard off whatever ``tracker`` says.
    """

    def __init__(
        self,
        log_dir: str | Path,
        exp_name: str,
        enabled_tensorboard: bool = True,
        progress_total: int | None = None,
        progress_bar: bool = True,
        start_step: int = 0,
        *,
        log_file: bool = True,
        summary_plot: bool = True,
        flush_secs: int = 10,
        tracker: str = "tensorboard",
        wandb_project: str = "reasonrl",
        wandb_run_name: str | None = None,
        run_config: dict[str, Any] | None = None,
    ):
        if tracker not in TRACKERS:
            raise ValueError(f"tracker={tracker!r} is unknown; valid: {', '.join(TRACKERS)}")
        if not exp_name or "/" in exp_name or exp_name in (".", ".."):
            raise ValueError(f"exp_name must be a plain directory name, got {exp_name!r}")
        self.run_dir = Path(log_dir).expanduser() / exp_name
        if int(start_step) == 0 and self.run_dir.is_dir() and any(self.run_dir.iterdir()):
            aside = move_aside(self.run_dir, "prev")  # a fresh start never destroys an earlier run's logs
            logger.warning(f"{self.run_dir} held an earlier run's logs: kept as {aside.name}, this run starts afresh")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.exp_name = exp_name
        self.start_step = int(start_step)
        self.summary_plot = summary_plot
        self.metrics_path = self.run_dir / METRICS_FILE
        self.generations_dir = self.run_dir / GENERATIONS_DIR
        self.nonfinite_counts: Counter[str] = Counter()
        self.last_step: int | None = None
        self._closed = False
        self._logged_rows = 0

        self.wandb = None  # started first: a W&B error (no login, not installed) leaves nothing open
        if tracker in ("wandb", "both"):
            from reasonrl.utils.wandb_logger import WandbLogger

            self.wandb = WandbLogger(
                self.run_dir,
                exp_name,
                project=wandb_project,
                name=wandb_run_name,
                config=to_jsonable(run_config or {}),
                start_step=self.start_step,
            )

        truncate_from_step(self.metrics_path, self.generations_dir, self.start_step)
        self._metrics_file = open(self.metrics_path, "a", encoding="utf-8")  # closed in close()

        self._sink_id = logger.add(self.run_dir / "train.log", level="DEBUG", enqueue=False) if log_file else None

        self.writer = None
        if enabled_tensorboard and tracker in ("tensorboard", "both"):
            from torch.utils.tensorboard import SummaryWriter

            # purge_step hides events with step >= start_step left by an earlier (crashed) session of this run
            self.writer = SummaryWriter(log_dir=str(self.run_dir), purge_step=self.start_step, flush_secs=flush_secs)

        self._bar = None
        self._postfix: dict[str, str] = {}
        if progress_bar:
            from tqdm.auto import tqdm

            self._bar = tqdm(
                total=progress_total,
                initial=self.start_step,
                unit="step",
                desc=exp_name,
                dynamic_ncols=True,
                disable=None,  # off when stderr is not a terminal
                file=sys.stderr,
            )
        self._ticker = None
        if self._bar is not None and not self._bar.disable:  # a terminal: the elapsed time ticks in long phases
            self._ticker = threading.Thread(target=self._tick, name="progress-ticker", daemon=True)
            self._ticker_stop = threading.Event()
            self._ticker.start()
        logger.info(f"tracking run {exp_name} in {self.run_dir} (start_step={self.start_step})")

    def _tick(self, every_s: float = 1.0) -> None:
        """Redraw the bar every second, so its elapsed time moves while a phase runs (start-up, generation)."""
        while not self._ticker_stop.wait(every_s):
            bar = self._bar
            if bar is None or self._closed:
                return
            bar.refresh()

    # ----- logging -----
    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """Log scalars of ``step``: TensorBoard, one ``metrics.jsonl`` row, one loguru line.

        Values may be Python numbers, NumPy scalars or one-element tensors. Non-finite values are written as
        ``null``, left out of TensorBoard, counted in :attr:`nonfinite_counts` and warned about.
        """
        self._check_open()
        step = int(step)
        clean: dict[str, float | int | None] = {}
        bad = []
        for key, value in metrics.items():
            if not isinstance(key, str) or key in RESERVED_KEYS:
                raise ValueError(f"invalid metric name {key!r}")
            number = to_number(key, value)
            if isinstance(number, float) and not math.isfinite(number):
                bad.append(key)
                self.nonfinite_counts[key] += 1
                clean[key] = None
            else:
                clean[key] = number
        if bad:
            logger.warning(f"step {step}: non-finite value(s) for {', '.join(bad)} (written as null)")
        row = {"step": step, "time": round(time.time(), 3), **clean}
        self._metrics_file.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._metrics_file.flush()
        self._logged_rows += 1
        if self.writer is not None:
            for key, value in clean.items():
                if value is not None:
                    self.writer.add_scalar(key, value, global_step=step)
        if self.wandb is not None:
            self.wandb.log(step, {k: v for k, v in clean.items() if v is not None})
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        logger.info(format_metrics_line(step, clean))

    def dump_generations(self, step: int, records: list[dict[str, Any]]) -> Path:
        """Append ``records`` (prompt, response, gold, reward, reason, finish_reason, ...) to
        ``generations/step_<step>.jsonl``, one JSON object per record. Text is stored as is; NumPy/torch values are
        converted and non-finite floats become ``null``. Returns the file path."""
        self._check_open()
        self.generations_dir.mkdir(parents=True, exist_ok=True)
        path = self.generations_dir / f"step_{int(step)}.jsonl"
        with open(path, "a", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(to_jsonable(record), ensure_ascii=False) + "\n")
        return path

    def log_table_at_start(self, text: str) -> None:
        """Log a block of text once (e.g. the config table): loguru, ``config.txt`` and TensorBoard text."""
        self._check_open()
        (self.run_dir / "config.txt").write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        logger.info("\n" + text)
        if self.writer is not None:
            indented = "\n".join("    " + line for line in text.splitlines())  # markdown code block
            self.writer.add_text("config", indented, global_step=self.start_step)

    def advance(self, step: int, postfix: dict[str, Any] | None = None) -> None:
        """Move the progress bar to ``step`` (steps done) and show ``postfix`` (short name → value) next to it."""
        if self._bar is None or self._closed:
            return
        self._bar.n = int(step)
        if postfix:
            self._postfix = {k: format_value(v) for k, v in postfix.items() if k != "phase"}
        self._bar.set_postfix(self._postfix, refresh=False)  # the step is done: no phase shown until the next one
        self._bar.refresh()

    def set_phase(self, phase: str | None) -> None:
        """Show what the current step is doing (``generate``, ``forward``, ``update``, ``sync``, ``eval``, ...) next
        to the bar, with the last step's values; ``None`` clears it. A no-op without a bar (cheap to call)."""
        if self._bar is None or self._closed:
            return
        shown = self._postfix if phase is None else {"phase": phase, **self._postfix}
        self._bar.set_postfix(shown, refresh=True)

    def flush(self) -> None:
        if self._closed:
            return
        self._metrics_file.flush()
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        """Flush and close everything (idempotent); then write the summary plot if enabled and rows were logged."""
        if self._closed:
            return
        self._closed = True
        self._metrics_file.close()
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
        if self._ticker is not None:
            self._ticker_stop.set()
            self._ticker.join(timeout=5)
        if self._bar is not None:
            self._bar.close()
        if self.wandb is not None:
            try:
                self.wandb.finish()
            except Exception as exc:  # W&B must never fail the end of a run
                logger.warning(f"wandb finish failed: {exc!r}")
        if self.nonfinite_counts:
            logger.warning(f"non-finite metric values this session: {dict(self.nonfinite_counts)}")
        if self.summary_plot and self._logged_rows:
            try:
                from reasonrl.utils.plots import plot_run

                plot_run(self.metrics_path, self.run_dir / "summary.png", self.run_dir / "summary.html")
            except Exception as exc:  # a plot must never fail the end of a run
                logger.warning(f"summary plot failed: {exc!r}")
        if self._sink_id is not None:
            logger.remove(self._sink_id)
            self._sink_id = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"tracker of {self.run_dir} is closed")

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

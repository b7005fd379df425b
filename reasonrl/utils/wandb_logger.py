"""Weights & Biases for :class:`reasonrl.utils.tracking.Tracker` (``tracker=wandb`` or ``both``): the only module
that imports ``wandb``, and only when a run asks for it.

One reasonrl run is one W&B run: project ``wandb_project``, name ``wandb_run_name`` (default: the exp_name), the
config logged once at ``wandb.init``, scalars with the trainer's step. The run id is kept in
``<log_dir>/<exp_name>/wandb_run_id``: a resumed session (``start_step > 0``) continues the same W&B run, a fresh
start (``start_step = 0``, the earlier logs moved aside) opens a new one. W&B never goes back in steps: after a
resume from a checkpoint older than the last logged step, W&B ignores the repeated steps (``metrics.jsonl`` and
TensorBoard do rewind).

Mode and place come from the usual W&B environment: ``WANDB_MODE=offline`` writes the run to disk without network
(upload later with ``wandb sync <dir>``), ``WANDB_API_KEY`` / ``wandb login`` for online runs, ``WANDB_DIR`` for
the folder (default: ``<log_dir>/<exp_name>/``, which then holds ``wandb/``).
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any

RUN_ID_FILE = "wandb_run_id"
INSTALL_HINT = "pip install 'reasonrl[wandb]'"


def import_wandb():
    """The ``wandb`` module, or an ``ImportError`` that says how to install it."""
    try:
        import wandb
    except ImportError as err:
        raise ImportError(f"tracker=wandb/both needs the wandb package: {INSTALL_HINT}") from err
    return wandb


def run_id(run_dir: Path, exp_name: str, resuming: bool) -> str:
    """The W&B run id of this run: the one recorded in ``run_dir`` when resuming, else a new one
    (``<exp_name>-<8 hex>``, characters W&B accepts only), recorded for the next resume."""
    path = Path(run_dir) / RUN_ID_FILE
    if resuming and path.is_file():
        recorded = path.read_text(encoding="utf-8").strip()
        if recorded:
            return recorded
    safe_name = re.sub(r"[^A-Za-z0-9_-]+", "-", exp_name)[:48].strip("-") or "run"
    new_id = f"{safe_name}-{secrets.token_hex(4)}"
    path.write_text(new_id + "\n", encoding="utf-8")
    return new_id


class WandbLogger:
    """A started W&B run: :meth:`log` scalars of a step, :meth:`finish` once."""

    def __init__(
        self,
        run_dir: Path,
        exp_name: str,
        *,
        project: str = "reasonrl",
        name: str | None = None,
        config: dict[str, Any] | None = None,
        start_step: int = 0,
    ):
        wandb = import_wandb()
        self.run = wandb.init(
            project=project,
            name=name or exp_name,
            id=run_id(run_dir, exp_name, resuming=start_step > 0),
            resume="allow",
            config=config or {},
            dir=os.environ.get("WANDB_DIR") or str(run_dir),
            settings=wandb.Settings(console="off"),  # train.log keeps the console; no wrapped stdout/stderr
        )

    def log(self, step: int, scalars: dict[str, float | int]) -> None:
        """Scalars of ``step``; several calls with the same step fill one W&B history row."""
        if scalars:
            self.run.log(scalars, step=int(step))

    def finish(self) -> None:
        self.run.finish()

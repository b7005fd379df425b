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

The scalar names the trainer logs are listed, with their meaning, in :data:`SCALARS`.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from loguru import logger

from reasonrl.config.names import TRACKERS
from reasonrl.utils.paths import move_aside


class Scalar(NamedTuple):
    name: str  # "<dataset>" stands for an eval dataset name, "@k" for "@<number>"
    meaning: str


SCALARS: tuple[Scalar, ...] = (
    # rewards (per training step, over all sampled responses of the step)
    Scalar("reward/mean", "mean final reward per response (after shaping/penalties)"),
    Scalar("reward/accuracy", "fraction of responses whose extracted answer verified as correct"),
    Scalar("reward/truncated_frac", "fraction of responses that did not finish by themselves (finish reason != stop)"),
    # responses
    Scalar("response/length_mean", "mean response length in tokens"),
    Scalar("response/length_max", "longest response in tokens"),
    Scalar("response/clip_frac", "truncation rate: fraction of responses stopped by the generation length limit"),
    # policy update (means over all PPO mini-batches of the step)
    Scalar("policy/kl", "mean per-token KL(policy ‖ reference) over response tokens (configured estimator)"),
    Scalar("policy/entropy", "mean per-token entropy of the policy over response tokens"),
    Scalar("policy/clipfrac", "fraction of response tokens whose probability ratio was clipped (either side)"),
    Scalar("policy/clipfrac_low", "fraction clipped at the lower bound (ratio < 1 - eps_low, negative advantage)"),
    Scalar("policy/clipfrac_high", "fraction clipped at the upper bound (ratio > 1 + eps_high, positive advantage)"),
    Scalar("policy/approx_kl", "approximate KL(old policy ‖ new policy) during the update; large = steps too big"),
    Scalar(
        "policy/old_logprobs_reused",
        "1 when the old-log-prob forward was skipped: one policy step per rollout, so the update's own log-probs "
        "(detached) are the old ones and the ratio is exactly 1",
    ),
    Scalar("policy/grad_norm", "policy gradient norm before clipping"),
    Scalar("policy/lr", "policy learning rate"),
    Scalar("policy/loss", "policy loss of the mini-batch (PPO/GSPO/CISPO/REINFORCE term + KL loss - entropy bonus)"),
    Scalar("policy/dual_clipfrac", "fraction of negative-advantage tokens cut by the dual clip"),
    Scalar("policy/ratio_mean", "mean probability ratio pi/pi_old over response tokens"),
    Scalar("policy/ratio_max", "largest probability ratio"),
    Scalar("policy/ratio_min", "smallest probability ratio"),
    Scalar("policy/seq_ratio_mean", "gspo: mean sequence-level ratio exp(mean_t log pi/pi_old) over sequences"),
    # critic (PPO with a value model only)
    Scalar("critic/value_loss", "value-function loss"),
    Scalar("critic/vf_clipfrac", "fraction of value predictions clipped by the value clip range"),
    Scalar("critic/grad_norm", "critic gradient norm before clipping"),
    Scalar("critic/lr", "critic learning rate"),
    Scalar("critic/vf_mean", "mean predicted value over response tokens"),
    Scalar("critic/vf_error", "mean squared error (V - R)^2 over response tokens"),
    # advantages and returns (over response tokens, as used in the loss)
    Scalar("adv/mean", "mean advantage"),
    Scalar("adv/std", "standard deviation of advantages"),
    Scalar("adv/max", "largest advantage"),
    Scalar("adv/min", "smallest advantage"),
    Scalar("adv/nonzero_frac", "fraction of response tokens with a non-zero advantage (0 = no learning signal)"),
    Scalar("returns/mean", "mean return (value target)"),
    # controllers
    Scalar("kl/coef", "current KL coefficient (fixed or from the adaptive controller)"),
    Scalar("entropy/coef", "current entropy-bonus coefficient"),
    # sampling
    Scalar(
        "sampling/kept_groups_frac", "fraction of prompt groups kept by the group filter (e.g. DAPO: not all equal)"
    ),
    Scalar("sampling/tries", "generation rounds needed to fill the batch"),
    Scalar("sampling/samples", "samples trained on this step after the group filter (target: rollout x n)"),
    # repetition of the trained responses (reasonrl.rewards.repetition; n = 10 words, looping = 3 repeats)
    Scalar("repetition/looping_frac", "fraction of responses in which some 10-word n-gram occurs 3+ times"),
    Scalar("repetition/max_ngram_count_mean", "mean over responses of the largest n-gram count"),
    Scalar("repetition/max_ngram_count_max", "largest n-gram count of any response"),
    Scalar("repetition/rep_ratio_mean", "mean rep-n ratio: 1 - distinct n-grams / n-grams"),
    # throughput
    Scalar("perf/tokens_per_s_generate", "generated tokens per second of time/generate (all engines together)"),
    Scalar("perf/tokens_per_s_train_policy", "response tokens per second of the policy update"),
    Scalar("perf/tokens_per_s_train_critic", "response tokens per second of the critic update"),
    # phase timings, seconds of wall time within the step
    Scalar("time/generate", "rollout generation with vLLM: wall time until the last engine returned"),
    Scalar("time/reward", "reward computation not hidden behind generation (after the last engine returned)"),
    Scalar(
        "time/reward_overlapped",
        "reward computation that ran while engines were still generating (each engine's part is scored on arrival)",
    ),
    Scalar("time/forward", "forward passes: reference logprobs, critic values, old policy logprobs"),
    Scalar("time/advantages", "advantage and return computation"),
    Scalar("time/update", "policy and critic updates"),
    Scalar("time/sync", "weight sync policy -> vLLM, including verification"),
    Scalar("time/eval", "evaluation (on steps that evaluate)"),
    Scalar("time/checkpoint", "checkpoint save (on steps that save)"),
    Scalar("time/step", "the whole step"),
    # weight sync
    Scalar("sync/total_s", "seconds of the last weight sync (gather + transfer + load + verify)"),
    Scalar("sync/bytes", "bytes of parameters sent to the engines by the last sync"),
    Scalar("sync/buckets", "number of buckets (each a set of whole decoder layers) of the last sync"),
    Scalar("sync/gather_s", "seconds gathering ZeRO-3 shards into full tensors"),
    Scalar("sync/load_s", "seconds the engines spent loading the new weights"),
    Scalar("sync/verify_s", "seconds of the probe check (policy vs engines)"),
    Scalar("sync/probe_max_abs_diff", "max |logprob difference| between policy and engines on the probe"),
    Scalar(
        "reward/model_score_mean",
        "mean score of the learned reward model over every sampled response (when reward_pretrain is set); "
        "it is part of reward/mean and of what dynamic sampling filters on",
    ),
    Scalar("reward/rule_mean", "mean rule (or reward_fn) reward alone, when a reward model adds its score"),
    Scalar("reward/greedy_baseline_mean", "remax: mean final reward of the greedy response per prompt"),
    # evaluation (on steps that evaluate), see reasonrl.eval_metrics
    Scalar("eval/<dataset>/avg@k", "mean accuracy over k samples per prompt, averaged over the dataset's prompts"),
    Scalar("eval/<dataset>/pass@k", "unbiased pass@k: chance that one of k samples is correct, averaged over prompts"),
    Scalar("eval/<dataset>/maj@k", "majority answer of k samples is correct (math scorer), averaged over prompts"),
    Scalar("eval/<dataset>/num_prompts", "number of prompts evaluated"),
    # SFT runs (reasonrl.sft)
    Scalar("sft/loss", "token-mean NLL of the response tokens of the step's global batch"),
    Scalar("sft/lr", "learning rate the step used"),
    Scalar("sft/grad_norm", "global gradient 2-norm before clipping"),
    Scalar("eval/<dataset>/loss", "SFT: token-mean response NLL on the held-out pairs"),
)

# compact per-step loguru line: (metric, label)
HEADLINE: tuple[tuple[str, str], ...] = (
    ("reward/mean", "reward"),
    ("reward/accuracy", "acc"),
    ("response/length_mean", "len"),
    ("response/clip_frac", "trunc"),
    ("policy/kl", "kl"),
    ("policy/entropy", "ent"),
    ("sft/loss", "loss"),
    ("sft/lr", "lr"),
    ("time/step", "step_s"),
)

METRICS_FILE = "metrics.jsonl"
GENERATIONS_DIR = "generations"
_RESERVED_KEYS = ("step", "time")


def _scalar_pattern(template: str) -> re.Pattern:
    pattern = re.escape(template).replace(re.escape("<dataset>"), r"[^/]+").replace(re.escape("@k"), r"@\d+")
    return re.compile(f"^{pattern}$")


_SCALAR_PATTERNS = [_scalar_pattern(s.name) for s in SCALARS]


def known_scalar(name: str) -> bool:
    """Whether ``name`` is documented in :data:`SCALARS` (``eval/math500/pass@16`` matches the templates)."""
    return any(p.match(name) for p in _SCALAR_PATTERNS)


def _number(key: str, value: Any) -> float | int:
    """A Python int/float from a number, a NumPy scalar or a one-element tensor/array; else ``TypeError``."""
    if hasattr(value, "numel"):  # torch tensor
        if value.numel() == 1:
            value = value.item()
    elif hasattr(value, "item") and getattr(value, "size", None) == 1:  # NumPy scalar or one-element array
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    raise TypeError(f"metric {key!r}: expected a number, got {type(value).__name__}: {value!r}"[:300])


def to_jsonable(obj: Any) -> Any:
    """Recursively convert for JSON: NumPy/torch scalars and arrays to Python, non-finite floats to ``None``,
    tuples/sets to lists, paths and other objects to ``str``. Strings are kept as they are (never evaluated)."""
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays/scalars, torch tensors
        return to_jsonable(obj.tolist())
    return str(obj)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` (``null`` values come back as ``None``). A torn last line (crash mid-write) and
    other unparsable lines are skipped with a warning. A missing file gives ``[]``."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                logger.warning(f"{path}:{lineno}: skipping unparsable line")
                continue
            if isinstance(row, dict) and isinstance(row.get("step"), int):
                rows.append(row)
    return rows


def metrics_by_step(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Merge rows of the same step (several log_metrics() calls per step), later values winning; ``time`` dropped."""
    merged: dict[int, dict[str, Any]] = {}
    for row in rows:
        target = merged.setdefault(row["step"], {})
        target.update({k: v for k, v in row.items() if k not in _RESERVED_KEYS})
    return dict(sorted(merged.items()))


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

        self._truncate_previous(self.start_step)
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
        logger.info(f"tracking run {exp_name} in {self.run_dir} (start_step={self.start_step})")

    # ----- resume -----
    def _truncate_previous(self, start_step: int) -> None:
        rows_text = []
        dropped = 0
        if self.metrics_path.is_file():
            with open(self.metrics_path, encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                        keep = isinstance(row, dict) and isinstance(row.get("step"), int) and row["step"] < start_step
                    except ValueError:
                        keep = False  # a torn line from a crash mid-write
                    if keep:
                        rows_text.append(line if line.endswith("\n") else line + "\n")
                    elif line.strip():
                        dropped += 1
        if dropped:
            backup = self.metrics_path.with_name(METRICS_FILE + ".bak")
            os.replace(self.metrics_path, backup)
            tmp = self.metrics_path.with_name(f".{METRICS_FILE}.tmp-{os.getpid()}")
            tmp.write_text("".join(rows_text), encoding="utf-8")
            os.replace(tmp, self.metrics_path)
            logger.warning(
                f"{self.metrics_path}: dropped {dropped} row(s) with step >= {start_step} left by an earlier session "
                f"(previous file kept as {backup.name})"
            )
        if self.generations_dir.is_dir():
            stale = [p for p in self.generations_dir.glob("step_*.jsonl") if _generation_step(p) >= start_step]
            for p in stale:
                p.unlink()
            if stale:
                logger.warning(f"{self.generations_dir}: removed {len(stale)} dump(s) of steps >= {start_step}")

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
            if not isinstance(key, str) or key in _RESERVED_KEYS:
                raise ValueError(f"invalid metric name {key!r}")
            number = _number(key, value)
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
            self._postfix = {k: _short(v) for k, v in postfix.items() if k != "phase"}
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


def _generation_step(path: Path) -> int:
    match = re.match(r"^step_(\d+)\.jsonl$", path.name)
    return int(match.group(1)) if match else -1


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_metrics_line(step: int, metrics: dict[str, Any]) -> str:
    """``step 12 | reward 0.41 acc 0.38 len 512 ... | generate 8.1s reward 0.2s ... | eval/math500/pass@4 0.6``."""
    parts = [f"step {step}"]
    head = [f"{label} {_short(metrics[key])}" for key, label in HEADLINE if key in metrics]
    if head:
        parts.append(" ".join(head))
    timings = [
        f"{key[5:]} {metrics[key]:.2f}s"
        for key in metrics
        if key.startswith("time/") and key != "time/step" and isinstance(metrics[key], (int, float))
    ]
    if timings:
        parts.append(" ".join(timings))
    evals = [f"{key} {_short(metrics[key])}" for key in metrics if key.startswith("eval/")]
    if evals:
        parts.append(" ".join(evals))
    return " | ".join(parts)

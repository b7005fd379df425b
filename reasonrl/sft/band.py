"""The accuracy band of an SFT run: stop training once the model's greedy accuracy on a validation split of its own
first enters ``[band_low, band_high]``, instead of after a fixed number of steps.

Why: the warm starts of the demos are short SFT runs, and where a fixed step count lands depends on the CPU (float
order): the arithmetic warm start was seen at 40.0%, 64.5% and 75.0% held-out after the same 400 steps on three
machines, so a demo's "before -> after" meant different things on each. Stopping by accuracy puts the warm start in
the same band on every machine (the step at which it stops is what varies), deterministically for a given machine.

The rule: measure every ``band_eval_interval`` steps from ``band_eval_from`` on, and at every step once the last
measurement came within one band width of ``band_low`` (a run can gain more than a band's width in one interval:
18.5 points in 5 steps seen on the arithmetic warm start, ~3.7 a step)::

    acc(s) = (1 / |V|) * sum_{(q, a) in V} judge(greedy(model_s, q), a)       V = band_data rows
    due(s) = s >= band_eval_from and (s % band_eval_interval == 0 or acc(last) >= band_low - (band_high - band_low))
    stop at the first due s with acc(s) >= band_low                          (entered; "overshot" if > band_high)
    else stop at max_steps                                                   (never entered: said, and recorded)

``judge`` is ``exact`` (the response, ended by EOS, equals the answer: the arithmetic and counting rewards) or
``code`` (the program passes every test of the row in the sandbox). ``greedy`` is plain transformers on the model
as exported at step ``s`` (:func:`reasonrl.models.greedy.greedy_texts`, the demos' own cross-check), so the band
is measured exactly as the demos measure. One step's gain must stay below the band's width (the recipes'
docstrings give the measured rates). :data:`RULE_VERSION` enters the warm starts' cache keys. The result is written
next to the exported model as ``band.json`` (:data:`BAND_FILE`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from loguru import logger

BAND_FILE = "band.json"
RULE_VERSION = 2  # 2: every step within one band width below band_low (bump when the stop rule changes)


@dataclasses.dataclass
class BandResult:
    """Where the band stopped the run: ``entered`` (some measured accuracy reached ``low``), ``overshot`` (that
    first accuracy was above ``high``), ``step`` and ``accuracy`` of the last measurement, ``history`` of every
    ``(step, accuracy)`` measured."""

    low: float
    high: float
    data: str
    metric: str
    entered: bool = False
    overshot: bool = False
    step: int = 0
    accuracy: float | None = None
    history: list[tuple[int, float]] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        band = f"band {self.low:.0%}-{self.high:.0%} on {self.data}"
        if self.accuracy is None:
            return f"{band}: never measured (no step was due)"
        where = f"{self.accuracy:.1%} at step {self.step}"
        if not self.entered:
            return f"{band}: never entered, {where} (stopped at max_steps: raise it or lower the band)"
        if self.overshot:
            return f"{band}: overshot, {where} (measure more often: lower band_eval_interval)"
        return f"{band}: entered, {where}"


def judge_texts(metric: str, rows: list[dict], texts: list[tuple[str, bool]]) -> list[bool]:
    """Per row, whether its greedy ``(text, ended with EOS)`` is right under ``metric`` (``exact`` / ``code``)."""
    if metric == "exact":
        from reasonrl.data.arithmetic import reward

        return [
            reward(text, row["answer"], finish_reason="stop" if ended else "length") == 1.0
            for row, (text, ended) in zip(rows, texts, strict=True)
        ]
    if metric == "code":
        from reasonrl.rewards.code import check_programs, extract_code

        verdicts = check_programs(
            [(extract_code(text), row["tests"]) for row, (text, _) in zip(rows, texts, strict=True)]
        )
        return [v.status == "passed" for v in verdicts]
    raise ValueError(f"unknown band metric {metric!r}: exact or code")


def greedy_accuracy(model_path: str | Path, rows: list[dict], metric: str, max_new_tokens: int) -> float:
    """Greedy accuracy of the HF folder ``model_path`` on ``rows`` (plain transformers; pictures where rows have
    them)."""
    from reasonrl.models.greedy import greedy_texts

    images = [r["images"] for r in rows] if rows and rows[0].get("images") else None
    texts = greedy_texts(model_path, [r["question"] for r in rows], max_new_tokens, images=images)
    return sum(judge_texts(metric, rows, texts)) / len(rows)


def band_validation_rows(cfg) -> list[dict] | None:
    """The rows of ``cfg.band_data`` (``question`` and ``answer``, or ``tests`` for code), or None without a band."""
    if cfg.band_low is None:
        return None
    from reasonrl.data import load_rows

    rows = load_rows(cfg.band_data, answer_from="none").rows
    if not rows:
        raise ValueError(f"band_data={cfg.band_data!r} holds no rows")
    return rows


class AccuracyBand:
    """Measures the band's accuracy when a step is due and says when to stop. ``export(folder)`` writes the model
    as it is now (an HF folder, with its tokenizer); ``rows`` are the band's validation rows."""

    def __init__(self, cfg, rows: list[dict], export: Callable[[Path], None]):
        self.cfg, self.rows, self.export = cfg, rows, export
        self.result = BandResult(cfg.band_low, cfg.band_high, cfg.band_data, cfg.band_metric)

    def due(self, step: int) -> bool:
        """Whether ``step`` is measured: every ``band_eval_interval`` steps from ``band_eval_from``, and every step
        once the last measurement is within one band width below ``band_low`` (module docstring)."""
        if step < self.cfg.band_eval_from:
            return False
        r = self.result
        near = r.accuracy is not None and r.accuracy >= r.low - (r.high - r.low)
        return near or step % self.cfg.band_eval_interval == 0

    def measure(self, step: int) -> float:
        """The greedy accuracy of the model at ``step`` (exported to a temporary folder, then removed)."""
        folder = Path(tempfile.mkdtemp(prefix="reasonrl-band-"))
        try:
            self.export(folder)
            acc = greedy_accuracy(folder, self.rows, self.cfg.band_metric, self.cfg.band_max_new_tokens)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        r = self.result
        r.step, r.accuracy = step, acc
        r.history.append((step, acc))
        if acc >= r.low:
            r.entered, r.overshot = True, acc > r.high
        return acc

    def write(self, out_dir: Path) -> None:
        """``band.json`` in ``out_dir`` (the exported model's folder) and one log line."""
        (Path(out_dir) / BAND_FILE).write_text(json.dumps(dataclasses.asdict(self.result), indent=1) + "\n")
        (logger.info if self.result.entered and not self.result.overshot else logger.warning)(
            f"SFT {self.result.summary()}"
        )


def read_band(model_dir: str | Path) -> BandResult | None:
    """The band result written beside an exported model, or None (no band was set)."""
    path = Path(model_dir) / BAND_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    data["history"] = [tuple(h) for h in data.get("history", [])]
    return BandResult(**data)

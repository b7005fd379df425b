"""The accuracy band of an SFT run (``reasonrl.sft.band``, issue 45): the warm starts stop once their greedy
accuracy on a validation split of their own first enters a stated band, so they land in it on any CPU.

The stop rule is checked on a scripted accuracy sequence (the greedy decode replaced, the rule is the unit); a real
one-thread SFT build stops inside its band, at its first entry, and its recorded accuracy is what a fresh greedy
decode of the export gives. The cached warm starts (built with the machine's cores, 2 threads here) are checked the
same way in tests/test_demo.py and tests/test_demo_distill.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

import reasonrl.sft.band as band_module
from reasonrl.sft.band import AccuracyBand, BandResult, read_band


def scripted_band(monkeypatch, accuracies: list[float], low=0.5, high=0.6, every=5, start=10) -> AccuracyBand:
    cfg = dataclasses.make_dataclass(
        "Cfg",
        [
            ("band_low", float, low),
            ("band_high", float, high),
            ("band_data", str, "arith_add2_val"),
            ("band_metric", str, "exact"),
            ("band_eval_interval", int, every),
            ("band_eval_from", int, start),
            ("band_max_new_tokens", int, 8),
        ],
    )()
    script = iter(accuracies)
    exported = []
    monkeypatch.setattr(band_module, "greedy_accuracy", lambda folder, rows, metric, tokens: next(script))
    return AccuracyBand(cfg, [{"question": "1+1=", "answer": "2"}], exported.append)


def run_until_stop(band: AccuracyBand, max_steps: int) -> int:
    """The trainer's loop as it uses the band: measure when due, stop at the first entry, else at max_steps."""
    for step in range(1, max_steps + 1):
        if band.due(step):
            band.measure(step)
            if band.result.entered:
                return step
    return max_steps


def test_the_run_stops_at_the_first_measurement_inside_the_band(monkeypatch):
    band = scripted_band(monkeypatch, [0.1, 0.3, 0.55, 0.9])
    assert [s for s in range(1, 31) if band.due(s)] == [10, 15, 20, 25, 30]  # from band_eval_from, every interval
    assert run_until_stop(band, 100) == 20
    r = band.result
    assert (r.entered, r.overshot, r.step, r.accuracy) == (True, False, 20, 0.55)
    assert r.history == [(10, 0.1), (15, 0.3), (20, 0.55)]
    assert r.summary() == "band 50%-60% on arith_add2_val: entered, 55.0% at step 20"


def test_within_one_band_width_below_it_every_step_is_measured(monkeypatch):
    """A run can gain more than the band's width in one interval (18.5 points in 5 steps seen): once the last
    measurement is within one width of band_low (here >= 0.4), every step is measured."""
    band = scripted_band(monkeypatch, [0.1, 0.45, 0.48, 0.52])
    assert run_until_stop(band, 100) == 17
    assert band.result.history == [(10, 0.1), (15, 0.45), (16, 0.48), (17, 0.52)]
    assert not band.result.overshot


def test_a_jump_over_the_band_and_a_band_never_reached_are_said(monkeypatch):
    over = scripted_band(monkeypatch, [0.2, 0.7])
    assert run_until_stop(over, 100) == 15 and over.result.overshot
    assert "overshot, 70.0% at step 15 (measure more often" in over.result.summary()

    never = scripted_band(monkeypatch, [0.1, 0.2, 0.3])
    assert run_until_stop(never, 20) == 20 and not never.result.entered
    assert "never entered, 30.0% at step 20 (stopped at max_steps" in never.result.summary()


def test_the_result_is_written_beside_the_model_and_read_back(monkeypatch, tmp_path):
    band = scripted_band(monkeypatch, [0.52])
    band.measure(10)
    band.write(tmp_path)
    assert read_band(tmp_path) == band.result
    assert json.loads((tmp_path / "band.json").read_text())["history"] == [[10, 0.52]]
    assert read_band(tmp_path / "elsewhere") is None  # no band.json: a model trained without a band


def test_the_code_metric_runs_the_programs_in_the_sandbox():
    rows = [{"tests": {"fn_name": "f", "inputs": [[1], [2]], "outputs": [3, 4]}}] * 2
    texts = [("def f(x):\n    return x + 2", True), ("def f(x):\n    return x * 3", True)]
    assert band_module.judge_texts("code", rows, texts) == [True, False]
    assert band_module.judge_texts("exact", [{"answer": "7"}] * 3, [("7", True), ("7", False), ("8", True)]) == [
        True,
        False,  # truncated: the reward's rule (it must end with EOS)
        False,
    ]


@pytest.mark.integration
def test_a_one_thread_build_stops_inside_its_band_at_the_first_entry(ray_cluster, tmp_path):
    """A real SFT build (the arithmetic warm start's recipe, one torch thread, a low band so it stops after ~150-200
    steps) lands in its band; measured on this project's CPU (every 5 steps then): 10.5% at step 155 with 1 thread
    and with 2 (the same weights), and 10.0% at step 205 with torch's and oneDNN's kernels limited to AVX2
    (``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2``, another trajectory: 6.5% at step 155): another step, the
    same band; measured every step (this rule): 10.5% at step 155 again. The
    recorded accuracy is what a fresh greedy decode of the export gives (tolerance: the build decoded in the driver
    of the SFT run, this test in its own process with other thread counts; a greedy answer flips only on a tie of
    its top two logits within rounding, 2 of 200)."""
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import ArithWarmStartConfig, warm_start_path
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    low, high = 0.10, 0.25
    cfg = dataclasses.replace(
        ArithWarmStartConfig(),
        exp_name="band_1thread",
        torch_threads=1,
        band_low=low,
        band_high=high,
        band_eval_from=140,  # the band's width exceeds band_low: every step is measured from here on
        max_steps=450,
    )
    path = warm_start_path(cfg, cache_dir=tmp_path / "models", log_dir=str(tmp_path / "logs"))
    band = read_band(path)
    print(band.summary(), band.history)
    assert isinstance(band, BandResult) and band.entered and not band.overshot
    assert low <= band.accuracy <= high
    assert all(acc < low for _, acc in band.history[:-1]), "it stops at the first measurement inside the band"
    steps = [s for s, _ in band.history]
    assert steps[0] == cfg.band_eval_from and steps[-1] == band.step
    for (prev, acc), step in zip(
        band.history[:-1], steps[1:], strict=True
    ):  # the schedule: every interval, every step when near
        near = acc >= low - (high - low)
        every = cfg.band_eval_interval
        assert step == (prev + 1 if near else (prev // every + 1) * every), band.history
    assert json.loads((path / "reasonrl_sft.json").read_text())["result"]["steps"] == band.step
    rows = metrics_by_step(read_metrics(tmp_path / "logs" / "band_1thread" / "metrics.jsonl"))
    assert {s: rows[s]["eval/band/accuracy"] for s, _ in band.history} == dict(band.history)
    assert max(rows) == band.step, "no step is trained after the band is entered"
    fresh = band_module.greedy_accuracy(path, load_rows("arith_add2_val").rows, "exact", cfg.band_max_new_tokens)
    assert fresh == pytest.approx(band.accuracy, abs=0.01)

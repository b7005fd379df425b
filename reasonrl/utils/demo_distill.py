"""The runs and the report of ``python -m reasonrl.demo --task distill`` (its runner is ``reasonrl.demo.main_distill``:
an entry point's code imports this module, never the other way): on-policy distillation against GRPO from the same
weak student.

    python -m reasonrl.demo --task distill                   # 2 seeds x (distillation, GRPO) x 20 steps
    python -m reasonrl.demo --task distill --steps 10 --seeds 1 --seed 3

1. Warm starts (``reasonrl.sft.warm_start``, built on first use and cached): the student ``arith-sft-student``, an
   early checkpoint of the ``arith-sft`` SFT run (~25% held-out); the teacher ``arith-sft-teacher``, ``arith-sft``
   after more SFT (~97%). The teacher's held-out accuracy is checked with plain transformers before anything runs.
2. For each seed (``--seed``, ``--seed + 1``, ... ``--seeds`` of them), two RL runs from the student with the same
   budget (``--steps`` steps of 64 prompts x 8 samples, the same optimizer): on-policy distillation
   (``playground.arith_distill_cpu.ArithDistillCPUConfig``: the teacher's per-token reverse-KL reward alone) and
   GRPO (``ArithGRPOStudentCPUConfig``: the exact-match reward alone).
3. The side-by-side table: greedy held-out accuracy (200 problems) every :data:`EVAL_INTERVAL` steps for every run,
   the mean seconds per step of each (the teacher's forward pass is distillation's extra cost), and the summary: the
   step at which distillation first reaches the accuracy GRPO has after all its steps (the goal of issue 43: at most
   half of GRPO's steps).

The runs' folders are ``<log-dir>/demo_distill_s<seed>`` and ``demo_distill_grpo_s<seed>`` (and the same under
``--ckpt-dir``), replaced by each demo run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from reasonrl.utils.story import eval_command

STEPS = 20  # --task distill's default number of RL steps of each run
EVAL_INTERVAL = 2  # held-out eval every this many steps: the curve
METHODS = {"distill": "distill", "grpo": "distill-grpo"}  # method -> the task of reasonrl.demo.recipe
EVAL_KEY = "eval/arith_add2_heldout/avg@1"


@dataclasses.dataclass
class DistillRun:
    method: str  # "distill" or "grpo"
    seed: int
    result: object  # reasonrl.demo.DemoResult
    curve: dict[int, float]  # step -> greedy held-out accuracy (the trainer's eval)


def heldout_curve(metrics_path: Path) -> dict[int, float]:
    """step -> greedy held-out accuracy of the steps that evaluated, from a run's ``metrics.jsonl``."""
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    rows = metrics_by_step(read_metrics(metrics_path))
    return {step: row[EVAL_KEY] for step, row in rows.items() if row.get(EVAL_KEY) is not None}


def steps_to_reach(curve: dict[int, float], target: float) -> int | None:
    """The first evaluated step whose accuracy is at least ``target`` (None: never)."""
    return next((step for step, accuracy in sorted(curve.items()) if accuracy >= target), None)


def distill_summary(
    runs: list[DistillRun], warm: dict[str, tuple[Path, str]], teacher_accuracy: float, total: float
) -> str:
    """The demo's report: the warm starts, the held-out accuracy of every run per evaluated step side by side, the
    seconds per step, and per seed the step at which distillation reaches GRPO's final accuracy."""
    seeds = sorted({run.seed for run in runs})
    by = {(run.method, run.seed): run for run in runs}
    columns = [(method, seed) for seed in seeds for method in METHODS if (method, seed) in by]
    steps = max(run.result.steps for run in runs)
    student_accuracy = runs[0].curve.get(0)
    lines = [
        "",
        "reasonrl demo: on-policy distillation vs GRPO from the same weak student (2-digit addition, 200 held-out "
        "problems)",
        f"  student  arith-sft-student ({warm['student'][0].name}): {warm['student'][1]}"
        + (f"; held-out {student_accuracy:.1%}" if student_accuracy is not None else ""),
        f"  teacher  arith-sft-teacher ({warm['teacher'][0].name}): {warm['teacher'][1]}; held-out "
        f"{teacher_accuracy:.1%} (transformers, greedy)",
        f"  {steps} steps of 64 prompts x 8 samples each; held-out accuracy (greedy) per step:",
        "    step " + "".join(f"{_label(method, seed):>13s}" for method, seed in columns),
    ]
    evaluated = sorted({step for run in runs for step in run.curve})
    for step in evaluated:
        cells = [by[c].curve.get(step) for c in columns]
        lines.append(f"    {step:4d} " + "".join(f"{'' if v is None else f'{v:.1%}':>13s}" for v in cells))
    lines.append("  s/step " + "".join(f"{by[c].result.mean_step_seconds:>13.1f}" for c in columns))
    for seed in seeds:
        distill, grpo = by.get(("distill", seed)), by.get(("grpo", seed))
        if distill is None or grpo is None:
            continue
        target = grpo.result.heldout_after
        reached = steps_to_reach(distill.curve, target)
        cost = distill.result.mean_step_seconds / grpo.result.mean_step_seconds
        goal = grpo.result.steps // 2
        verdict = (
            f"reaches it at step {reached} (goal: <= {goal}: {'met' if reached <= goal else 'not met'})"
            if reached is not None
            else f"does not reach it in its {distill.result.steps} steps (goal: <= {goal}: not met)"
        )
        lines += [
            f"  seed {seed}: GRPO {target:.1%} after {grpo.result.steps} steps; distillation {verdict}",
            f"          distillation {distill.result.heldout_after:.1%} after {distill.result.steps} steps; cost "
            f"{distill.result.mean_step_seconds:.1f} vs {grpo.result.mean_step_seconds:.1f} s/step ({cost:.2f}x)",
        ]
    lines.append(f"  curves: {runs[0].result.log_dir.parent}/demo_distill*_s<seed>/summary.png")
    distilled = next((run for run in runs if run.method == "distill"), None)
    if distilled is not None:
        lines.append(f"  evaluate the distilled student again: {eval_command(distilled.result.final_model)}")
    lines.append(f"  total wall time {total:.0f} s")
    return "\n".join(lines)


def _label(method: str, seed: int) -> str:
    return f"{'distill' if method == 'distill' else 'GRPO'} s{seed}"

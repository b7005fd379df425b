"""Held-out accuracy and build time of the distillation demo's warm starts: the student ``arith-sft-student`` (an
early checkpoint of the ``arith-sft`` run) and the teacher ``arith-sft-teacher`` (``arith-sft`` after more SFT).

    python benchmarks/bench_distill_warm_starts.py                 # both, as configured (built first if missing)
    python benchmarks/bench_distill_warm_starts.py --student-steps 150 200 --teacher-steps 150 250 \\
        --teacher-batch 128 --cache-dir /tmp/distill_ws          # other schedules, built elsewhere

``--student-steps`` trains those fixed step counts (the student's accuracy band switched off); by default the student
stops in its band (:mod:`reasonrl.sft.band`).

Accuracy: greedy exact match on the 200 held-out problems (``arith_add2_heldout``) with plain transformers
(:func:`reasonrl.demo.greedy_accuracy`). A teacher starts from ``arith-sft`` (the cached one: its build is not
counted in the teacher's).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--student-steps", type=int, nargs="*", default=None, help="default: the student's")
    parser.add_argument("--teacher-steps", type=int, nargs="*", default=None, help="default: the teacher's")
    parser.add_argument("--teacher-batch", type=int, default=None, help="default: the teacher's")
    parser.add_argument("--teacher-lr", type=float, default=None, help="default: the teacher's")
    parser.add_argument("--teacher-schedule", default=None, help="constant / linear / cosine (default: the teacher's)")
    parser.add_argument("--teacher-warmup", type=int, default=None, help="default: the teacher's")
    parser.add_argument("--cache-dir", default=None, help="build the warm starts here (default: the cache)")
    parser.add_argument("--only", choices=["student", "teacher"], default=None)
    args = parser.parse_args(argv)
    from reasonrl.data import load_rows
    from reasonrl.demo import greedy_accuracy
    from reasonrl.sft.warm_start import (
        ArithStudentWarmStartConfig,
        ArithTeacherWarmStartConfig,
        register_offline_models,
        warm_start_path,
    )

    register_offline_models()  # the teacher's pretrain=arith-sft
    rows = load_rows("arith_add2_heldout").rows
    configs = []
    if args.only != "teacher":
        student = ArithStudentWarmStartConfig()
        if args.student_steps:  # fixed step counts: the accuracy band would stop them sooner
            configs += [
                dataclasses.replace(student, max_steps=s, band_low=None, band_high=None) for s in args.student_steps
            ]
        else:
            configs.append(student)
    if args.only != "student":
        teacher = ArithTeacherWarmStartConfig()
        changes = {
            "train_batch_size": args.teacher_batch,
            "lr": args.teacher_lr,
            "lr_schedule": args.teacher_schedule,
            "warmup_steps": args.teacher_warmup,
        }
        teacher = dataclasses.replace(teacher, **{k: v for k, v in changes.items() if v is not None})
        configs += [dataclasses.replace(teacher, max_steps=s) for s in args.teacher_steps or [teacher.max_steps]]
    for cfg in configs:
        start = time.perf_counter()
        path = warm_start_path(cfg, cache_dir=Path(args.cache_dir) if args.cache_dir else None, log_dir="logs")
        built = time.perf_counter() - start
        start = time.perf_counter()
        accuracy = greedy_accuracy(path, rows)
        print(
            f"{cfg.exp_name:18s} steps={cfg.max_steps:4d} batch={cfg.train_batch_size:4d} lr={cfg.lr:g} "
            f"{cfg.lr_schedule}/warmup {cfg.warmup_steps} | build/lookup {built:5.0f} s | held-out "
            f"({len(rows)}) {accuracy:.1%} | eval {time.perf_counter() - start:.0f} s | {path.name}",
            flush=True,
        )


if __name__ == "__main__":
    main()

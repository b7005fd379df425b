"""Sandbox throughput against the unsandboxed baseline, in the same run.

    python benchmarks/bench_sandbox.py [--programs 200] [--workers 2 3 4] [--repeat 3]

Each program is trivial (reads two numbers, prints their sum) with two stdin/stdout tests. Baseline: sequential
``subprocess.run([python, "-c", program], input=...)``, one process per test (what SkyRL does), no containment.
Sandbox: ``check_programs`` (namespaces, rlimits, fresh tmpfs, a fresh ``python -I -S`` per program, a fork per
test), at several worker counts. Prints programs/s (median of ``--repeat``) and the ratio, then a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from reasonrl.rewards.code import CodeRewardConfig, check_programs
from reasonrl.sandbox import namespaces_available

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = {"inputs": ["1 2\n", "20 22\n"], "outputs": ["3\n", "42\n"]}


def baseline(n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        for stdin, expected in zip(TESTS["inputs"], TESTS["outputs"], strict=True):
            out = subprocess.run(
                [sys.executable, "-c", PROGRAM], input=stdin, capture_output=True, text=True, timeout=10
            )
            assert out.stdout == expected, out
    return n / (time.perf_counter() - start)


def sandboxed(n: int, workers: int) -> float:
    start = time.perf_counter()
    verdicts = check_programs([(PROGRAM, TESTS)] * n, config=CodeRewardConfig(workers=workers))
    rate = n / (time.perf_counter() - start)
    bad = [v for v in verdicts if v.status != "passed"]
    assert not bad, bad[:3]
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--programs", type=int, default=200)
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 3, 4])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    summary = {"cpus": os.cpu_count(), "programs": args.programs, "namespaces": namespaces_available()}
    base = [baseline(args.programs) for _ in range(args.repeat)]
    summary["baseline_programs_per_s"] = statistics.median(base)
    print(f"baseline sequential subprocess.run: {summary['baseline_programs_per_s']:.1f} programs/s")
    for w in args.workers:
        rate = statistics.median(sandboxed(args.programs, w) for _ in range(args.repeat))
        ratio = rate / summary["baseline_programs_per_s"]
        summary[f"sandbox_w{w}_programs_per_s"] = rate
        summary[f"sandbox_w{w}_ratio"] = ratio
        print(f"sandbox, {w} workers: {rate:.1f} programs/s ({ratio:.2f}x the baseline)")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

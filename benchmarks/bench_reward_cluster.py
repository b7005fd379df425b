"""Code-reward throughput: the driver's sandbox pool against reward actors (``reward_num_cpus``) on the same cores.

    python benchmarks/bench_reward_cluster.py [--rows 328] [--workers 2] [--repeat 5]

The batch: HumanEval's canonical solutions (``reasonrl.data.humaneval``, 164 problems, HumanEval-style checks in the
sandbox), each as a completion with a fenced program; past 164 rows the problems repeat with a comment that makes
each program text distinct (``check_programs`` runs a repeated (program, tests) pair once per batch, which would
flatter both sides). Every program passes, on both sides, or the benchmark stops.

* driver: the routing scorer with ``reward_num_cpus=0`` and ``code_workers=W``: one process pool on the driver.
* actors: a local Ray instance with exactly W logical CPUs, the routing scorer with ``reward_num_cpus=W``, its
  actors started by the run's own ``reasonrl.run.launch.start_reward_actors``: W single-CPU actors, one sandbox
  worker each, the batch cut in W chunks.

Both are up at once and score the whole batch in turns, ``--repeat`` rounds after a warm-up round (load from
anything else on the machine falls on both alike); the table shows programs per second (median) and the ratio.
One machine cannot show the point of actors (more CPUs than the driver has), only what they cost on the same
cores: Ray's scheduling, pickling the chunks, and a chunk that finishes late idling its actor while the driver's
pool keeps every worker busy to the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time


def batch(n: int) -> tuple[list, list[dict]]:
    """``n`` completions and rows of HumanEval canonical solutions, every program text distinct."""
    from reasonrl.data.humaneval import humaneval_rows, humaneval_source
    from reasonrl.dataplane.completion import Completion

    problems = humaneval_rows(humaneval_source())
    completions, rows = [], []
    for i in range(n):
        row = problems[i % len(problems)]
        program = row["answer"] + (f"\n# copy {i // len(problems)}\n" if i >= len(problems) else "")
        text = f"```python\n{program}```\n"
        completions.append(Completion(i, 0, [1], [5] * 8, text, "stop"))
        rows.append(row)
    return completions, rows


def config(**kw):
    from reasonrl.config import BasePPOExpConfig

    return BasePPOExpConfig(pretrain="tiny", device="cpu", reward_fn=None, **kw)


def score_once(scorer, completions, rows) -> float:
    """Programs per second of one batch; every program must pass."""
    start = time.perf_counter()
    results = scorer(completions, rows)
    rate = len(rows) / (time.perf_counter() - start)
    failed = [(row["id"], r.reason) for row, r in zip(rows, results, strict=True) if r.reason != "correct"]
    assert not failed, failed[:5]
    return rate


def compare(workers: int, completions, rows, repeat: int) -> tuple[list[float], list[float]]:
    """``(driver rates, actor rates)``: both scorers up at once, their batches alternated (a warm-up batch each
    first), so that load from anything else on the machine falls on both alike."""
    import ray

    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.rewards.routing import build_scorer
    from reasonrl.run.launch import start_reward_actors

    init_ray(num_cpus=workers, object_store_memory=256 * 1024**2)
    driver = build_scorer(config(code_workers=workers))
    cfg = config(reward_num_cpus=workers)
    on_actors = build_scorer(cfg)
    try:
        with contextlib.ExitStack() as stack:
            start_reward_actors(cfg, stack, on_actors).wait_ready()
            driver_rates, actor_rates = [], []
            for i in range(repeat + 1):
                d, a = score_once(driver, completions, rows), score_once(on_actors, completions, rows)
                if i:
                    driver_rates.append(d)
                    actor_rates.append(a)
                    print(f"round {i}: driver {d:.1f}, actors {a:.1f} programs/s", flush=True)
            return driver_rates, actor_rates
    finally:
        driver.close()
        on_actors.close()
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=328, help="programs per batch (HumanEval's 164, repeated)")
    ap.add_argument("--workers", type=int, default=2, help="W: driver pool workers = reward actors = Ray CPUs")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    completions, rows = batch(args.rows)
    driver, actors = compare(args.workers, completions, rows, args.repeat)
    d, a = statistics.median(driver), statistics.median(actors)
    print(
        f"\n{args.rows} HumanEval programs per batch, W={args.workers}, {os.cpu_count()} cores, median of {args.repeat}"
    )
    print(f"| {'scoring':<34} | {'programs/s':>10} | {'vs driver':>9} |")
    print(f"|{'-' * 36}|{'-' * 12}|{'-' * 11}|")
    print(f"| {f'driver pool, {args.workers} workers':<34} | {d:>10.1f} | {1.0:>8.2f}x |")
    print(f"| {f'{args.workers} reward actors (reward_num_cpus)':<34} | {a:>10.1f} | {a / d:>8.2f}x |")
    summary = {
        "rows": args.rows,
        "workers": args.workers,
        "cores": os.cpu_count(),
        "driver_programs_per_s": driver,
        "actors_programs_per_s": actors,
        "ratio_median": a / d,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

"""Synchronous vs asynchronous RL on the learning demo (GRPO on 2-digit addition from the ``arith-sft`` warm start),
both under split placement with the same seed and step count: held-out accuracy, and who was busy when.

    python benchmarks/bench_async.py                 # 30 steps each (~6 min on 2 cores)
    python benchmarks/bench_async.py --steps 10
    python benchmarks/bench_async.py --steps 10 --staleness 1 2   # (k=2 is refused since the engines cannot
                                                                 # receive weights while they generate)

Per step, from metrics.jsonl: the engines are busy for ``time/generate`` (+ scoring), the trainers for
``time/forward + time/advantages + time/update`` and both for ``time/sync``. Synchronously the step is the sum; with
``async_staleness=1`` generation of step s+1 runs during step s's training, so the step shrinks towards the larger
of the two. ``overlap`` is the busy time hidden that way: ``generate + train + sync - step``.

The model at the end: a GPU step whose generation takes a fraction g of the synchronous step (0.7 for long chains
of thought) takes ``max(g, 1 - g)`` of it asynchronously (ignoring the sync), a speed-up of ``1 / max(g, 1 - g)``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from reasonrl.demo import run_rl
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

SPLIT = dict(colocate_all=False, cpus_per_bundle=2.0, eval_interval=5, rollout_correction="token_tis")


def step_table(log_dir: Path, steps: int) -> dict[str, float]:
    """Median per-step seconds of each part, and the accuracy curve."""
    rows = metrics_by_step(read_metrics(log_dir / "metrics.jsonl"))
    trained = [rows[s] for s in range(2, steps + 1)]  # step 1 has nothing generated ahead

    def median(*keys: str) -> float:
        return statistics.median(sum(r.get(k, 0.0) for k in keys) for r in trained)

    out = {
        "step": median("time/step"),
        "generate": median("time/generate", "time/reward"),
        "train": median("time/forward", "time/advantages", "time/update"),
        "sync": median("time/sync"),
        "wait_rollout": median("time/wait_rollout"),
    }
    out["overlap"] = max(0.0, out["generate"] + out["train"] + out["sync"] - out["step"])
    out["trainer_idle"] = out["step"] - out["train"] - out["sync"]
    out["engine_idle"] = out["step"] - out["generate"]
    key = next(k for k in rows[0] if k.startswith("eval/") and k.endswith("/avg@1"))
    out["curve"] = {s: rows[s][key] for s in sorted(rows) if key in rows[s]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1], help="the async_staleness values to run")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for staleness in args.staleness:
            name = f"async_staleness={staleness}" if staleness else "synchronous"
            root = Path(tmp) / name.replace("=", "")
            run = run_rl(
                "grpo",
                steps=args.steps,
                log_dir=str(root / "logs"),
                ckpt_dir=str(root / "ckpt"),
                async_staleness=staleness,
                **SPLIT,
            )
            results[name] = step_table(run.log_dir, args.steps) | {"rl_seconds": run.rl_seconds}
    print(f"\nGRPO demo, split placement, {args.steps} steps, seed 0 (median s/step over steps 2..{args.steps})\n")
    print("| run | step | generate | train | sync | wait for rollout | overlap | trainer idle | engine idle | total |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        cells = [r[k] for k in ("step", "generate", "train", "sync", "wait_rollout", "overlap")]
        cells += [r["trainer_idle"], r["engine_idle"], r["rl_seconds"]]
        print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    print("\nheld-out accuracy (greedy, 200 problems) by step:")
    for name, r in results.items():
        print(f"  {name}: " + ", ".join(f"{s}: {a:.3f}" for s, a in r["curve"].items()))
    g = 0.7
    print(
        f"\nmodel: generation {g:.0%} of a synchronous GPU step -> async step {max(g, 1 - g):.0%} of it, "
        f"{1 / max(g, 1 - g):.2f}x faster (k=1, sync time ignored)"
    )


if __name__ == "__main__":
    main()

"""The math GRPO demo with full fine-tuning against rank-8 LoRA (merged sync and adapter-only sync), same warm start,
seed and steps: held-out accuracy before -> after, mean step time, weight-sync bytes and time per step, and the peak
resident memory of the DeepSpeed workers (``ray::PolicyWorker`` and ``ray::ReferenceWorker`` processes, summed,
sampled every 0.2 s: LoRA has no reference worker).

    python benchmarks/bench_lora_demo.py                 # 10 steps each
    python benchmarks/bench_lora_demo.py --steps 6 --modes full,adapter
"""

from __future__ import annotations

import argparse
import statistics
import threading
from pathlib import Path


def workers_rss_bytes() -> int:
    """Summed resident memory of the processes titled ``ray::PolicyWorker`` / ``ray::ReferenceWorker`` (/proc)."""
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if not (proc / "cmdline").read_bytes().startswith((b"ray::PolicyWorker", b"ray::ReferenceWorker")):
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class PeakSampler:
    def __init__(self, interval_s: float = 0.2):
        self.interval_s, self.peak, self._stop = interval_s, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, workers_rss_bytes())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run(mode: str, steps: int, seed: int, root: Path) -> dict:
    from reasonrl.demo import run_rl
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    lora = mode != "full"
    extra = {"lora_sync": mode} if lora else {}
    folders = dict(log_dir=str(root / mode / "logs"), ckpt_dir=str(root / mode / "ckpt"))
    with PeakSampler() as sampler:
        result = run_rl("grpo", steps=steps, seed=seed, lora=lora, eval_interval=steps, **folders, **extra)
    rows = metrics_by_step(read_metrics(result.log_dir / "metrics.jsonl"))
    synced = [rows[s] for s in range(1, steps + 1) if "sync/bytes" in rows.get(s, {})]
    return {
        "mode": mode,
        "before": result.heldout_before,
        "after": result.heldout_after,
        "step_s": result.mean_step_seconds,
        "sync_bytes": statistics.median(r["sync/bytes"] for r in synced),
        "sync_s": statistics.median(r["sync/total_s"] for r in synced),
        "workers_rss_gb": sampler.peak / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default="full,merged,adapter", help="full, merged (LoRA), adapter (LoRA)")
    parser.add_argument("--out", default="/tmp/reasonrl_bench_lora")
    args = parser.parse_args()
    results = [run(mode, args.steps, args.seed, Path(args.out)) for mode in args.modes.split(",")]
    print(f"\nmath GRPO demo, {args.steps} steps, seed {args.seed} (LoRA: rank 8, all-linear)")
    print("| mode | held-out before -> after | step time | sync bytes (median) | sync time | workers RSS peak |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['mode']} | {r['before']:.1%} -> {r['after']:.1%} | {r['step_s']:.2f} s | "
            f"{r['sync_bytes'] / 1e6:.2f} MB | {r['sync_s']:.3f} s | {r['workers_rss_gb']:.2f} GB |"
        )


if __name__ == "__main__":
    main()

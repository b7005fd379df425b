"""GRPO step time with and without images on the same tiny text model: the vision demo (``tiny-vlm``: a 4-layer,
256-wide Llama text model behind a 2-layer vision tower; 56 x 56 pictures, 16 image tokens + 3 markers per prompt)
against the math demo (``tiny-demo``: a 4-layer, 256-wide Qwen2), both from their SFT warm starts, the same batch
(32 prompts x 8 samples), seed and steps, interleaved. Prints per-phase medians (steps 2..N) and the mean response
length, and for each the largest |trainer - vLLM| log-prob of a sampled token (``rollout_correction=monitor``).

    python benchmarks/bench_vision_step.py                 # 6 steps each, one repetition
    python benchmarks/bench_vision_step.py --steps 8 --repeats 2
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

PHASES = ("time/step", "time/generate", "time/forward", "time/update", "time/sync", "response/length_mean")


def run(task: str, steps: int, seed: int, root: Path) -> dict:
    from reasonrl.demo import run_rl
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    folders = dict(log_dir=str(root / task / "logs"), ckpt_dir=str(root / task / "ckpt"))
    result = run_rl(
        "grpo",
        task=task,
        steps=steps,
        seed=seed,
        eval_interval=steps,
        rollout_batch_size=32,
        rollout_correction="monitor",
        **folders,
    )
    rows = metrics_by_step(read_metrics(result.log_dir / "metrics.jsonl"))
    steady = [rows[s] for s in range(2, steps + 1)]
    out = {name: statistics.median(r[name] for r in steady if name in r) for name in PHASES}
    out["logp_diff_max"] = max(r.get("policy/rollout_corr/logp_abs_diff_max", 0.0) for r in steady)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="/tmp/reasonrl_bench_vision")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"math": [], "vision": []}
    for _ in range(args.repeats):
        for task in results:  # interleaved
            results[task].append(run(task, args.steps, args.seed, Path(args.out)))
    print(f"\nGRPO steps 2..{args.steps}, 32 prompts x 8 samples, medians (s); {args.repeats} repetition(s)")
    print(f"{'phase':18s} {'text (math)':>12s} {'images (vision)':>16s} {'ratio':>7s}")
    for name in PHASES:
        text = statistics.median(r[name] for r in results["math"])
        image = statistics.median(r[name] for r in results["vision"])
        print(f"{name:18s} {text:12.2f} {image:16.2f} {image / text:7.2f}")
    for task, runs in results.items():
        diff = max(r["logp_diff_max"] for r in runs)
        print(f"{task}: max |trainer - vLLM| log-prob of a sampled token over the steps: {diff:.2e}")


if __name__ == "__main__":
    main()

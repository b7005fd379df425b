"""Streaming a rollout into the next stages, on the learning demo (GRPO on 2-digit addition with its reference
model), under split placement with the same seed and step count: ``stream_rollout=false`` (each engine's part
scored when it returns, the forwards after the rollout) against ``stream_rollout=true`` (each completion scored as
it finishes, the reference / policy forwards of each full chunk of kept samples started while the engine still
generates). Both cut the forwards into the same chunks (``--chunk-tokens``), so their numbers must be identical;
the script checks that and prints who waited for whom.

    python benchmarks/bench_streaming.py                  # 10 steps each (~3 min on 2 cores)
    python benchmarks/bench_streaming.py --steps 5 --chunk-tokens 512

Per step (medians over steps 2..N, from metrics.jsonl): ``generate`` is the wall time until the engine finished,
``reward`` the scoring after it, ``reward hidden`` the scoring done while it generated; ``forward`` the forward
time after the rollout, ``forward hidden`` the forward time that ran while the engine generated.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from reasonrl.demo import run_rl
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

SPLIT = dict(colocate_all=False, cpus_per_bundle=2.0, eval_interval=0)
COLUMNS = {
    "step": "time/step",
    "generate": "time/generate",
    "reward": "time/reward",
    "reward hidden": "time/reward_overlapped",
    "forward": "time/forward",
    "forward hidden": "time/forward_overlapped",
    "chunks": "perf/forward_chunks",
}
SAME = ("reward/mean", "response/length_mean", "policy/loss", "policy/kl", "policy/grad_norm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--chunk-tokens", type=int, default=1024)
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, streamed in (("stream_rollout=false", False), ("stream_rollout=true", True)):
            root = Path(tmp) / str(streamed)
            run = run_rl(
                "grpo",
                steps=args.steps,
                log_dir=str(root / "logs"),
                ckpt_dir=str(root / "ckpt"),
                stream_rollout=streamed,
                forward_chunk_tokens=args.chunk_tokens,
                **SPLIT,
            )
            rows[name] = metrics_by_step(read_metrics(run.log_dir / "metrics.jsonl"))
    steps = range(2, args.steps + 1)  # step 1 includes warm-up
    print(f"\nGRPO demo, split placement, {args.steps} steps, forward chunks of {args.chunk_tokens} tokens")
    print(f"(median seconds per step over steps 2..{args.steps})\n")
    print("| run | " + " | ".join(COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for name, by_step in rows.items():
        cells = [statistics.median(by_step[s].get(key, 0.0) for s in steps) for key in COLUMNS.values()]
        text = [f"{c:.0f}" if k == "chunks" else f"{c:.3f}" for k, c in zip(COLUMNS, cells, strict=True)]
        print(f"| {name} | " + " | ".join(text) + " |")
    plain, streamed = rows.values()
    differing = [
        (s, key) for s in range(1, args.steps + 1) for key in SAME if plain[s].get(key) != streamed[s].get(key)
    ]
    print(f"\nidentical {', '.join(SAME)} at every step: {'yes' if not differing else f'NO, {differing[:5]}'}")


if __name__ == "__main__":
    main()

"""Synchronous, one-step-off and fully asynchronous RL side by side on one long-tailed workload (issue 41 item 5).

    python benchmarks/bench_async.py                    # every configuration, 12 steps each (~12 min on 2 cores)
    python benchmarks/bench_async.py --steps 8 --only sync fully_k2_keep
    python benchmarks/bench_async.py --json out.json    # the table and the simulator's measured costs

Workload: the tiny random Qwen2 (fp32, GRPO, 8 prompts x 4 samples per step) on GSM8K questions whose responses
are capped per prompt at a length drawn lognormal (median 48 tokens, sigma 1, at most 384: the long tail of real
reasoning traces; the random model rarely ends a response itself, so the cap is the length). Every configuration
trains the same number of samples from the same prompts, seed 0, on the same two cores:

* split placement (one engine and one policy rank, a core each): ``sync`` (k = 0), ``one_step_off`` (k = 1, the
  rollout of the next step generated during this one's training), ``fully_k{1,2,4}_{keep,recompute}``
  (``fully_async``);
* ``colocated`` (``colocate_all``: generation and training each get both cores, in turns; synchronous).

Per configuration, over steps 3..N (warm): wall seconds, trained response tokens per second, engine idle % and
trainer idle % of the wall time, mean version lag of the trained tokens. Engine idle: synchronous runs
``1 - time/generate / time/step``; fully asynchronous runs the engines' own account (``async/engine_idle_frac``:
the share of their wall time outside an engine call with requests). Trainer idle: ``1 - (forward + advantages +
update + sync) / step``.

``--json`` also writes the measured unit costs (engine step time at batch 1 and 32, update seconds per trained
token, sync seconds) in the format of ``benchmarks/simulate_async.py --params``, to check the simulator against
these measurements.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from pathlib import Path

from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

CONFIGS: dict[str, dict] = {
    "sync": dict(colocate_all=False, async_staleness=0),
    "one_step_off": dict(colocate_all=False, async_staleness=1),
    **{
        f"fully_k{k}_{mode}": dict(colocate_all=False, async_staleness=k, fully_async=True, partial_rollout=mode)
        for k in (1, 2, 4)
        for mode in ("keep", "recompute")
    },
    "colocated": dict(colocate_all=True, async_staleness=0, cpus_per_bundle=2.0),
}
LENGTH_MEDIAN, LENGTH_SIGMA, LENGTH_MAX = 48, 1.0, 384


def long_tailed_rows(path: Path, count: int, seed: int = 0) -> Path:
    """GSM8K training questions, each with its own ``max_response_tokens`` drawn lognormal (module docstring)."""
    from reasonrl.data.loader import load_rows

    rng = random.Random(seed)
    rows = load_rows("gsm8k_train", limit=count).rows
    with path.open("w") as f:
        for row in rows:
            cap = min(LENGTH_MAX, max(1, round(LENGTH_MEDIAN * math.exp(rng.gauss(0.0, LENGTH_SIGMA)))))
            f.write(
                json.dumps(
                    {"id": row["id"], "question": row["question"], "answer": row["answer"]}
                    | {"max_response_tokens": cap}
                )
                + "\n"
            )
    return path


def run_config(
    name: str, fields: dict, data: Path, root: Path, steps: int, micro_batch_tokens: int = 8192, max_num_seqs=None
) -> Path:
    from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
    from reasonrl.exp import BasePPOExp

    cfg = TinyGRPOCPUConfig(
        exp_name=name,
        ckpt_dir=str(root / "ckpt"),
        log_dir=str(root / "logs"),
        train_data=[str(data)],
        eval_data=[],
        eval_before_training=False,
        eval_interval=0,
        save_interval=0,
        max_steps=steps,
        rollout_batch_size=8,
        n_samples_per_prompt=4,
        generate_max_len=LENGTH_MAX,
        max_tokens_per_micro_batch=micro_batch_tokens,
        vllm_max_num_seqs=max_num_seqs,
        policy_update_steps=1,
        rollout_correction="token_tis",
        vllm_num_engines=1,
        policy_devices_per_node=1,
        cpus_per_bundle=fields.get("cpus_per_bundle", 1.0),
        progress_bar=False,
        resume="none",
        **{k: v for k, v in fields.items() if k != "cpus_per_bundle"},
    )
    BasePPOExp(cfg).run()
    return root / "logs" / name / "metrics.jsonl"


def summarise(metrics: Path, steps: int) -> dict[str, float]:
    rows = metrics_by_step(read_metrics(metrics))
    warm = [rows[s] for s in range(3, steps + 1)]
    wall = sum(r["time/step"] for r in warm)
    tokens = sum(r["response/length_mean"] * 32 for r in warm)
    train = sum(
        r.get("time/forward", 0) + r.get("time/advantages", 0) + r["time/update"] + r["time/sync"] for r in warm
    )
    if "async/engine_idle_frac" in warm[0]:
        engine_idle = statistics.fmean(r["async/engine_idle_frac"] for r in warm)
        lag = statistics.fmean(r["async/version_lag_mean"] for r in warm)
    else:
        engine_idle = 1 - sum(r["time/generate"] for r in warm) / wall
        lag = statistics.fmean(r.get("async/staleness", 0.0) for r in warm)
    return {
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "engine_idle": engine_idle,
        "trainer_idle": 1 - train / wall,
        "version_lag": lag,
        "dropped_stale": warm[-1].get("async/dropped_stale", 0.0),
        "update_s_per_token": sum(r["time/update"] for r in warm) / tokens,
        "sync_s": statistics.median(r["time/sync"] for r in warm),
    }


def engine_step_costs() -> dict[str, float]:
    """Seconds per engine step at batch 1 and batch 32 (64 tokens each, EOS ignored), on one core: the
    simulator's ``decode_a_s + decode_c_s * b``."""
    import ray

    from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
    from reasonrl.models.tiny import tiny_model_path

    ray.init(num_cpus=2, include_dashboard=False)
    try:
        (engine,) = create_vllm_engines(1, str(tiny_model_path()), num_cpus=1, dtype="float32", max_model_len=512)
        ray.get(engine.ready.remote())
        out = {}
        for batch in (1, 1, 32):  # the first call warms up
            sampling = SamplingConfig(n=batch, temperature=1.0, max_tokens=64, ignore_eos=True, seed=0)
            start = time.perf_counter()
            ray.get(engine.generate.remote([[1, 2, 3, 4, 5, 6, 7, 8]], sampling))
            out[batch] = (time.perf_counter() - start) / 64
        c = (out[32] - out[1]) / 31
        return {"decode_a_s": out[1] - c, "decode_c_s": c}
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--only", nargs="+", choices=list(CONFIGS), help="configurations to run (default: all)")
    parser.add_argument("--json", type=Path, help="write the table and the simulator's measured costs here")
    parser.add_argument("--micro-batch-tokens", type=int, default=8192, help="max_tokens_per_micro_batch (all runs)")
    parser.add_argument(
        "--max-num-seqs", type=int, help="vllm_max_num_seqs: requests an engine runs at once (all runs)"
    )
    args = parser.parse_args()
    names = args.only or list(CONFIGS)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = long_tailed_rows(Path(tmp) / "long_tailed.jsonl", count=8 * args.steps * 6)
        for name in names:
            metrics = run_config(
                name, CONFIGS[name], data, Path(tmp) / name, args.steps, args.micro_batch_tokens, args.max_num_seqs
            )
            results[name] = summarise(metrics, args.steps)
    base = results.get("sync")
    best_sync = min((results[n]["wall_s"] for n in ("sync", "colocated") if n in results), default=None)
    print(
        f"\n{args.steps} steps of 32 samples, lengths lognormal (median {LENGTH_MEDIAN}, sigma {LENGTH_SIGMA}, max "
        f"{LENGTH_MAX}); steps 3..{args.steps}\n"
    )
    print(
        "| configuration | wall s | tokens/s | x sync split | x best sync | engine idle | trainer idle | lag | drops |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        x_sync = base["wall_s"] / r["wall_s"] if base else float("nan")
        x_best = best_sync / r["wall_s"] if best_sync else float("nan")
        print(
            f"| {name} | {r['wall_s']:.1f} | {r['tokens_per_s']:.0f} | {x_sync:.2f} | {x_best:.2f} | "
            f"{r['engine_idle']:.0%} | {r['trainer_idle']:.0%} | {r['version_lag']:.2f} | {r['dropped_stale']:.0f} |"
        )
    if args.json:
        costs = engine_step_costs()
        sync = results.get("sync", next(iter(results.values())))
        params = {
            "steps": args.steps - 2,
            "prompts_per_step": 8,
            "samples_per_prompt": 4,
            "length_median": LENGTH_MEDIAN,
            "length_sigma": LENGTH_SIGMA,
            "max_len": LENGTH_MAX,
            "engines": 1,
            "trainers": 1,
            "train_s_per_token": sync["update_s_per_token"],
            "sync_s": sync["sync_s"],
            **costs,
        }
        args.json.write_text(json.dumps({"results": results, "simulator_params": params}, indent=2))
        print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()

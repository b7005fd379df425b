"""The embedded default run (``make demo``): RL on CPU that measurably improves a model, with before/after numbers.

    python -m reasonrl.demo                      # GRPO, 30 steps: ~2 min on 2 cores (+ ~2 min SFT the first time)
    python -m reasonrl.demo --algo ppo           # PPO with GAE and a critic (~3 min)
    python -m reasonrl.demo --algo both --steps 10

1. Warm start (``pretrain=arith-sft``, ``reasonrl.sft.warm_start``): a 5M-parameter Qwen2 fine-tuned by the
   SFT trainer on 2-digit addition to a PARTIAL accuracy (~60%). Built once per machine, cached afterwards.
2. RL with the full stack (Ray, a DeepSpeed policy worker, a vLLM-CPU engine, exact-match reward): the recipes
   ``playground.arith_grpo_cpu`` / ``playground.arith_ppo_cpu``, 64 prompts x 8 samples per step.
3. Before -> after: the trainer's greedy accuracy on 200 held-out problems (ordered operand pairs absent from training)
   at step 0 and at the last step, cross-checked with plain transformers on the exported final policy.
4. Curves: ``logs/demo_<algo>/summary.png`` and ``summary.html`` (reward, accuracy, length, KL, entropy, step
   time).

``<ckpt-dir>/demo_<algo>`` and ``logs/demo_<algo>`` are the demo's own folders, replaced by each demo run.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import time
from pathlib import Path

from loguru import logger


@dataclasses.dataclass
class DemoResult:
    algo: str
    steps: int
    heldout_before: float  # greedy exact-match accuracy on the held-out problems at step 0 (trainer, vLLM)
    heldout_after: float  # ... after the last step
    train_reward_first: float  # mean sampled (T=1) training reward of the first 3 steps
    train_reward_last: float  # ... of the last 3 steps
    rl_seconds: float  # BasePPOExp.run(): start-up + training + evals + final checkpoint + shutdown
    mean_step_seconds: float
    log_dir: Path
    final_model: Path  # the exported HF policy of the last step

    @property
    def gain(self) -> float:
        return self.heldout_after - self.heldout_before


def recipe(algo: str):
    """The playground config class of ``algo`` (``grpo`` or ``ppo``)."""
    from playground.arith_grpo_cpu import ArithGRPOCPUConfig
    from playground.arith_ppo_cpu import ArithPPOCPUConfig

    classes = {"grpo": ArithGRPOCPUConfig, "ppo": ArithPPOCPUConfig}
    if algo not in classes:
        raise ValueError(f"algo must be one of {sorted(classes)}, got {algo!r}")
    return classes[algo]


def run_rl(algo: str, *, steps: int, seed: int = 0, log_dir: str = "logs", ckpt_dir: str = "ckpt/demo", **overrides):
    """One RL run of the ``algo`` recipe from the warm start, in a fresh checkpoint folder; its :class:`DemoResult`.
    ``overrides`` are extra config fields (e.g. ``eval_interval=5``)."""
    from reasonrl.data.eval_names import eval_set_names
    from reasonrl.exp import BasePPOExp
    from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

    exp_name = f"demo_{algo}"  # not the recipe's own name: the demo never touches a user's recipe runs
    cfg = recipe(algo)(exp_name=exp_name, seed=seed, max_steps=steps, log_dir=log_dir, ckpt_dir=ckpt_dir, resume="none")
    cfg = cfg.with_overrides({"progress_bar": False, **overrides})
    cfg.validate()
    for previous in (Path(ckpt_dir) / cfg.exp_name, Path(log_dir) / cfg.exp_name):  # the demo's own folders only
        if previous.exists():
            logger.info(f"replacing the previous demo run in {previous}")
            shutil.rmtree(previous)
    start = time.perf_counter()
    BasePPOExp(cfg).run()
    seconds = time.perf_counter() - start
    eval_key = f"eval/{eval_set_names(cfg.eval_data)[0]}/avg@1"
    rows = metrics_by_step(read_metrics(Path(log_dir) / cfg.exp_name / "metrics.jsonl"))
    rewards = [rows[s]["reward/mean"] for s in range(1, steps + 1) if rows.get(s, {}).get("reward/mean") is not None]
    step_times = [rows[s]["time/step"] for s in range(1, steps + 1) if rows.get(s, {}).get("time/step") is not None]
    return DemoResult(
        algo=algo,
        steps=steps,
        heldout_before=rows[0][eval_key],
        heldout_after=rows[steps][eval_key],
        train_reward_first=sum(rewards[:3]) / len(rewards[:3]),
        train_reward_last=sum(rewards[-3:]) / len(rewards[-3:]),
        rl_seconds=seconds,
        mean_step_seconds=sum(step_times) / len(step_times),
        log_dir=Path(log_dir) / cfg.exp_name,
        final_model=Path(ckpt_dir) / cfg.exp_name / f"step_{steps}" / "policy_hf",
    )


def greedy_accuracy(model_path: str | Path, rows: list[dict], max_new_tokens: int = 8, batch_size: int = 256) -> float:
    """Exact-match accuracy of greedy decoding with plain transformers (independent of vLLM and of the trainer):
    prompts are the bare questions, left-padded, tokenized as the RL trainer tokenizes them; a response counts only
    if it ended with EOS (the reward's rule)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reasonrl.data.arithmetic import reward

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    correct = 0.0
    for lo in range(0, len(rows), batch_size):
        chunk = rows[lo : lo + batch_size]
        ids = [tok(r["question"], add_special_tokens=False).input_ids for r in chunk]
        width = max(map(len, ids))
        input_ids = torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in ids])  # [batch, width]
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
            )
        for row, seq in zip(chunk, out[:, width:].tolist(), strict=True):
            finished = tok.eos_token_id in seq
            text = tok.decode(seq[: seq.index(tok.eos_token_id)] if finished else seq)
            correct += reward(text, row["answer"], finish_reason="stop" if finished else "length")
    return correct / len(rows)


def summary(results, checks, warm_path: Path, warm_seconds: float, cached: bool, total: float, log_dir="logs") -> str:
    lines = [
        "",
        "reasonrl demo: RL on CPU improves a small Qwen2 on 2-digit addition (200 held-out problems)",
        f"  warm start   {warm_path.name}: "
        + (
            "cached"
            if cached
            else f"SFT built in {warm_seconds:.0f} s (curves: {Path(log_dir) / 'arith_sft'}/summary.png)"
        ),
    ]
    for r, (check_before, check_after) in zip(results, checks, strict=True):
        lines += [
            f"  {r.algo.upper():5s}        {r.steps} steps, {r.rl_seconds:.0f} s ({r.mean_step_seconds:.1f} s/step)",
            f"    held-out accuracy (greedy, 200 problems)  {r.heldout_before:6.1%} -> {r.heldout_after:6.1%}"
            f"   ({100 * r.gain:+.1f} points)",
            f"    same, checked with transformers           {check_before:6.1%} -> {check_after:6.1%}",
            f"    training reward (sampled, T=1)            {r.train_reward_first:6.3f} -> {r.train_reward_last:6.3f}"
            "   (mean of the first / last 3 steps)",
            f"    curves: {r.log_dir}/summary.png, summary.html   final model: {r.final_model}",
        ]
    lines.append(f"  total wall time {total:.0f} s")
    return "\n".join(lines)


def main(argv=None) -> list[DemoResult]:
    parser = argparse.ArgumentParser(description="reasonrl learning demo: SFT warm start, then RL on CPU")
    parser.add_argument("--algo", choices=["grpo", "ppo", "both"], default="grpo")
    parser.add_argument("--steps", type=int, default=30, help="RL steps (64 prompts x 8 samples each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log-dir", default="logs")
    parser.add_argument("--ckpt-dir", default="ckpt/demo")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    from reasonrl.data import load_rows
    from reasonrl.sft.warm_start import ArithWarmStartConfig, warm_start_key, warm_start_path
    from reasonrl.utils.paths import cache_root

    start = time.perf_counter()
    cached = (cache_root() / "models" / warm_start_key(ArithWarmStartConfig()) / "model.safetensors").exists()
    warm_path = warm_start_path(log_dir=args.log_dir)
    warm_seconds = time.perf_counter() - start
    algos = ["grpo", "ppo"] if args.algo == "both" else [args.algo]
    results = [run_rl(a, steps=args.steps, seed=args.seed, log_dir=args.log_dir, ckpt_dir=args.ckpt_dir) for a in algos]
    heldout = load_rows("arith_add2_heldout").rows
    before = greedy_accuracy(warm_path, heldout)
    checks = [(before, greedy_accuracy(r.final_model, heldout)) for r in results]
    total = time.perf_counter() - start
    print(summary(results, checks, warm_path, warm_seconds, cached, total, args.log_dir), flush=True)
    return results


if __name__ == "__main__":
    main()

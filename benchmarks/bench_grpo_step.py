"""Seconds per GRPO step on a fixed workload, through the public recipe interface (issue: faster than TRL).

    python benchmarks/bench_grpo_step.py                               # defaults, 12 steps
    python benchmarks/bench_grpo_step.py packing_samples=false         # any config override, as on the CLI

Workload (the same as the TRL GRPOTrainer comparison): a random-init Qwen2 with 8 layers, hidden 512, 8 heads
(2 KV heads), MLP 1536, vocabulary 2048 (26.2 M parameters, fp32, the tiny tokenizer); 256 prompts
``"Compute {a}+{b}. Answer:"`` with a, b from ``random.Random(0)`` in 0..99; reward 1.0 when the completion contains
the right integer as a whole number (``benchmarks/addition_reward.py:reward``); per step 8 prompts x 4 samples, at
most 64 new tokens, temperature 1.0, top-p 1, no KL and no reference model, lr 1e-5, one optimizer step per
rollout, 12 steps, seed 0. Prints the median ``time/step`` of steps 3..12 and the median of each part.

    python benchmarks/bench_grpo_step.py --floor                       # the compute floor of the update

``--floor`` times a plain PyTorch forward + backward + AdamW step of the same model on a batch of the workload's
shape (32 sequences of a 12-token prompt + 64 response tokens, log-probs of the response tokens), with as many
threads as the machine has cores: what no framework can beat on this machine.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
from pathlib import Path

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.config.overrides import apply_overrides, parse_overrides
from reasonrl.models.tiny import TinyModelSpec, tiny_model_path
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

SPEC = TinyModelSpec(
    vocab_size=2048, hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
    num_key_value_heads=2, max_position_embeddings=2048,
)  # fmt: skip
PARTS = ("time/generate", "time/reward", "time/forward", "time/advantages", "time/update", "time/sync")


def write_prompts(path: Path, n: int = 256) -> Path:
    rng = random.Random(0)
    with path.open("w") as f:
        for _ in range(n):
            a, b = rng.randint(0, 99), rng.randint(0, 99)
            f.write(json.dumps({"prompt": f"Compute {a}+{b}. Answer:", "answer": str(a + b)}) + "\n")
    return path


def workload(root: Path, steps: int) -> TinyGRPOCPUConfig:
    return TinyGRPOCPUConfig(
        exp_name="bench_grpo_step",
        ckpt_dir=str(root / "ckpt"),
        log_dir=str(root / "logs"),
        seed=0,
        pretrain=str(tiny_model_path(SPEC)),
        train_data=[str(write_prompts(root / "addition.jsonl"))],
        eval_data=[],
        eval_before_training=False,
        eval_interval=0,
        prompt_template="plain",
        reward_fn=str(Path(__file__).with_name("addition_reward.py")) + ":reward",
        max_prompt_len=32,
        rollout_batch_size=8,
        n_samples_per_prompt=4,
        generate_max_len=64,
        temperature=1.0,
        top_p=1.0,
        kl_mode="none",
        init_kl_coef=0.0,
        actor_lr=1e-5,
        lr_warmup_steps=0,
        max_steps=steps,
        save_interval=0,
        progress_bar=False,
        dump_generations=0,
    )


def plain_torch_step(repeats: int = 5) -> None:
    import os
    import time

    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path(SPEC), dtype=torch.float32, attn_implementation="sdpa")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(3, SPEC.vocab_size, (32, 12 + 64), generator=torch.Generator().manual_seed(0))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        logits = model(input_ids=ids, use_cache=False).logits[:, 11:-1]  # [32, 64, vocab]: response positions
        logprobs = logits.float().log_softmax(-1).gather(-1, ids[:, 12:, None])  # [32, 64, 1]
        (-logprobs.mean()).backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    print(f"plain PyTorch step, {torch.get_num_threads()} threads: median {statistics.median(times[1:]):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="config overrides key=value (as on a recipe's command line)")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--floor", action="store_true", help="time a plain PyTorch training step instead")
    args = parser.parse_args()
    if args.floor:
        return plain_torch_step()
    from reasonrl.exp import BasePPOExp

    with tempfile.TemporaryDirectory() as tmp:
        cfg = apply_overrides(workload(Path(tmp), args.steps), parse_overrides(args.overrides))
        cfg.validate()
        BasePPOExp(cfg).run()
        rows = metrics_by_step(read_metrics(Path(cfg.log_dir) / cfg.exp_name / "metrics.jsonl"))
    timed = [rows[s] for s in range(3, args.steps + 1) if "time/step" in rows.get(s, {})]
    median = {k: statistics.median(r[k] for r in timed) for k in ("time/step", *PARTS) if all(k in r for r in timed)}
    tokens = statistics.median(r.get("response/length_mean", 0) * cfg.rollout_samples_per_step for r in timed)
    print(f"overrides: {' '.join(args.overrides) or '(none)'}")
    print(f"median of steps 3..{args.steps}: {median['time/step']:.2f} s/step, ~{tokens:.0f} completion tokens/step")
    print("  " + ", ".join(f"{k[5:]} {v:.2f}" for k, v in median.items() if k != "time/step"))
    for key in ("policy/old_logprobs_reused",):
        if key in timed[-1]:
            print(f"  {key} = {timed[-1][key]}")


if __name__ == "__main__":
    main()

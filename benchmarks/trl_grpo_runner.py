"""TRL's side of ``bench_vs_trl.py``: TRL's ``GRPOTrainer`` on the benchmark's model, prompts and reward, with each
step's generation, reward and training times written to a JSON file. Runs in TRL's own virtualenv (it imports TRL,
not reasonrl), started by ``bench_vs_trl.py``; TRL's pins may differ from reasonrl's.

    <trl-venv>/bin/python benchmarks/trl_grpo_runner.py --model <folder> --data prompts.jsonl --steps 12 --out t.json

The workload matches ``bench_grpo_step.py``: 8 prompts x 4 samples per step (``per_device_train_batch_size=32``,
``num_generations=4``: one optimizer step per rollout), at most 64 new tokens, temperature 1, top-p 1, no KL
(``beta=0``), lr 1e-5 constant, fp32 on the CPU with every core. Times: ``generate`` wraps the model's ``generate``
(TRL generates with transformers here, no vLLM), ``reward`` wraps the reward function, ``train`` is the rest of the
step (log-probs, loss, backward, optimizer step).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--reward-file", required=True, help="a .py file with reward(completion, answer) -> float")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(os.cpu_count() or 1)
    spec = importlib.util.spec_from_file_location("bench_reward", args.reward_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    times = {"generate": 0.0, "reward": 0.0}

    def reward(prompts, completions, answer, **_):
        start = time.perf_counter()
        scores = [float(module.reward(c, a)) for c, a in zip(completions, answer, strict=True)]
        times["reward"] += time.perf_counter() - start
        return scores

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    generate = model.generate

    def timed_generate(*a, **kw):
        start = time.perf_counter()
        try:
            return generate(*a, **kw)
        finally:
            times["generate"] += time.perf_counter() - start

    model.generate = timed_generate
    steps: list[dict] = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, *_, **__):
            times.update(generate=0.0, reward=0.0, start=time.perf_counter())

        def on_step_end(self, *_, **__):
            total = time.perf_counter() - times["start"]
            train = total - times["generate"] - times["reward"]
            steps.append({"step": total, "generate": times["generate"], "reward": times["reward"], "train": train})

    config = GRPOConfig(
        output_dir=os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl_out"),
        per_device_train_batch_size=32,
        num_generations=4,
        max_completion_length=64,
        temperature=1.0,
        top_p=1.0,
        beta=0.0,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        max_steps=args.steps,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=load_dataset("json", data_files=args.data, split="train"),
        processing_class=AutoTokenizer.from_pretrained(args.model),
        callbacks=[StepTimes()],
    )
    trainer.train()
    with open(args.out, "w") as f:
        json.dump({"steps": steps, "trl_version": __import__("trl").__version__}, f)


if __name__ == "__main__":
    main()

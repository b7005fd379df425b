"""Time policy -> vLLM weight sync: ZeRO-3 gather (2 ranks, gloo) + load into a vLLM engine + probe verification.

    python benchmarks/bench_weight_sync.py                    # tiny model and SmolLM2-135M, every transport
    python benchmarks/bench_weight_sync.py --model smollm2 --transport broadcast --verify-with both
    python benchmarks/bench_weight_sync.py --model smollm2 --transport broadcast --lora-rank 8 --lora-sync all

Prints bytes, buckets and seconds per phase for each sync (gather, load = transport + reload, check = the exact
fingerprint check, verify = the probe), and the probe's max |logprob diff|. ``ipc`` runs over shared memory here
(the CPU form of the colocated GPU transport, CUDA IPC). ``--lora-rank r``: the policy trains LoRA adapters; the
sync is ``full`` (no adapters), ``merged`` (W + s*B@A per bucket) or ``adapter`` (the adapter only, through vLLM's
LoRA support; one bucket, probe check only). Each configuration prints the median total over its syncs after the
first, with quartiles.
"""

from __future__ import annotations

import argparse


def bench(
    name: str, path: str, bucket_mb: int, repeats: int, transport: str, verify_with: str, lora_rank: int, mode: str
) -> None:
    import statistics

    import ray

    from reasonrl.distributed.adapter_sync import AdapterSyncer
    from reasonrl.distributed.ppo_workers import PolicyWorker, WorkerConfig
    from reasonrl.distributed.vllm_engine import create_vllm_engines
    from reasonrl.distributed.weight_sync import WeightSyncer
    from reasonrl.distributed.worker_group import WorkerGroup

    rank = 0 if mode == "full" else lora_rank
    policy = WorkerGroup(PolicyWorker, world_size=2, name=f"policy[{name}]")
    policy.call("setup", WorkerConfig(model_path=path, lr=1e-6, lora_rank=rank, lora_alpha=2.0 * max(rank, 1)))
    engine_lora = lora_rank if mode == "adapter" else 0
    (engine,) = create_vllm_engines(1, path, dtype="float32", max_model_len=512, lora_rank=engine_lora)
    ray.get(engine.ready.remote())
    probe = list(range(10, 42))
    if mode == "adapter":
        syncer = AdapterSyncer(policy, [engine], tol=1e-4, exact=True)
        transport, verify_with = "adapter", "trainer_forward"
    else:
        syncer = WeightSyncer(
            policy,
            [engine],
            bucket_bytes=bucket_mb * 1024**2,
            tol=1e-4,
            exact=True,
            transport=transport,
            verify_with=verify_with,
        )
    label = f"{name:8s} {mode:7s} {transport:12s} {verify_with:15s}"
    totals = []
    try:
        for i in range(repeats):
            report = syncer.run(probe)
            totals.append(report.total_s)
            print(
                f"{label} sync {i}: "
                f"{report.num_bytes / 1024**2:7.1f} MiB in {report.num_buckets:3d} buckets "
                f"({report.num_tensors} tensors)  gather {report.gather_s:6.3f}s  load {report.load_s:6.3f}s  "
                f"check {report.check_s:6.3f}s  verify {report.verify_s:6.3f}s  total {report.total_s:6.3f}s  "
                f"({report.params_checked} params checked, {report.reload_warnings_dropped} reload warnings dropped)  "
                f"probe diff {report.probe_max_abs_diff:.1e}"
            )
        steady = totals[1:] or totals  # the first sync of a process pays one-time costs (plan, group, warm-up)
        quartiles = statistics.quantiles(steady, n=4) if len(steady) > 1 else [steady[0]] * 3
        print(
            f"{label} median total over syncs 2..{repeats}: {statistics.median(steady):.3f}s "
            f"(quartiles {quartiles[0]:.3f}-{quartiles[2]:.3f}s; first sync {totals[0]:.3f}s)"
        )
    finally:
        ray.get(engine.shutdown.remote())
        ray.kill(engine)
        policy.kill()


def main() -> None:
    from reasonrl.config import BasePPOExpConfig

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["tiny", "smollm2", "both"], default="both")
    parser.add_argument(
        "--bucket-mb",
        type=int,
        default=BasePPOExpConfig.sync_bucket_mb,
        help="bucket size in MiB (default: the trainer's, sync_bucket_mb)",
    )
    parser.add_argument("--repeats", type=int, default=11, help="syncs per configuration (the first is left out)")
    parser.add_argument("--transport", choices=["broadcast", "ipc", "object_store", "all"], default="all")
    parser.add_argument("--verify-with", choices=["sent_weights", "trainer_forward", "both"], default="sent_weights")
    parser.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters on the policy (0: none)")
    parser.add_argument("--lora-sync", choices=["full", "merged", "adapter", "all"], default="merged")
    args = parser.parse_args()

    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.models import smollm2_path, tiny_model_path

    init_ray()
    models = {"tiny": tiny_model_path, "smollm2": smollm2_path}
    transports = ["broadcast", "ipc", "object_store"] if args.transport == "all" else [args.transport]
    sources = ["sent_weights", "trainer_forward"] if args.verify_with == "both" else [args.verify_with]
    modes = (
        ["full"]
        if not args.lora_rank
        else ["full", "merged", "adapter"]
        if args.lora_sync == "all"
        else [args.lora_sync]
    )
    for name in ["tiny", "smollm2"] if args.model == "both" else [args.model]:
        for mode in modes:
            for transport in transports if mode != "adapter" else ["adapter"]:
                for source in sources if mode != "adapter" else ["trainer_forward"]:
                    args_ = (args.bucket_mb, args.repeats, transport, source, args.lora_rank, mode)
                    bench(name, str(models[name]()), *args_)


if __name__ == "__main__":
    main()

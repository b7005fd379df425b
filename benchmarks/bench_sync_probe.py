"""The bf16 sync probe on SmolLM2-135M (issue 39 item 3): correct syncs pass, a skipped bucket fails, with margins.

    python benchmarks/bench_sync_probe.py                   # SmolLM2-135M, 10 syncs at lr 1e-6, one skipped bucket
    python benchmarks/bench_sync_probe.py --model tiny --syncs 3

A bf16 policy (1 rank, ZeRO-3) and a bf16 vLLM engine; the probe is the first 64 tokens of a real prompt, as in
training. One AdamW step before each sync. For each sync it prints the probe's margins (``DifferentialProbe``):

* the largest |engine change - trainer change| over the probe tokens against the per-token tolerance (4 x the
  first sync's HF-vs-vLLM disagreement, at least ``sync_verify_tolerance``) and against the old fixed 0.1;
* the RMS over the tokens of engine change - trainer change against its tolerance (4 x the first sync's RMS
  disagreement).

Then faults, each after a step: a sync that never loads one bucket (``--skip``: its index in the smallest-first
plan; default: the middle one and the last, the largest), which the exact check names, with the probe's verdict on
the engine's stale bucket; and no sync at all (the probe must say the engine did not change).
"""

from __future__ import annotations

import argparse
import copy

PROMPT = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips "
    "did Natalia sell altogether in April and May? Think step by step, then give the final answer after ####. "
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=["tiny", "smollm2"], default="smollm2")
    parser.add_argument("--syncs", type=int, default=10, help="correct syncs after the calibrating one")
    parser.add_argument("--lr", type=float, default=1e-6)
    parser.add_argument("--bucket-mb", type=int, default=32)
    parser.add_argument("--skip", type=int, default=None, help="the bucket the faulty sync never loads")
    parser.add_argument("--tol", type=float, default=0.1, help="sync_verify_tolerance (bf16 auto: 0.1)")
    args = parser.parse_args()

    import ray
    import torch
    from transformers import AutoTokenizer

    from reasonrl.algos.loss_settings import PolicyLossConfig
    from reasonrl.dataplane.experience import Experience
    from reasonrl.distributed.ppo_workers import PolicyWorker, WorkerConfig
    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.distributed.sync_checks import WeightSyncError
    from reasonrl.distributed.vllm_engine import create_vllm_engines
    from reasonrl.distributed.weight_sync import WeightSyncer
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.models import pad_batch, smollm2_path, tiny_model_path

    path = str(smollm2_path() if args.model == "smollm2" else tiny_model_path())
    init_ray()
    probe = AutoTokenizer.from_pretrained(path)(PROMPT)["input_ids"][:64]
    policy = WorkerGroup(PolicyWorker, world_size=1, num_cpus_per_actor=0.5, timeout_s=600)
    policy.call("setup", WorkerConfig(model_path=path, bf16=True, lr=args.lr))
    (engine,) = create_vllm_engines(1, path, num_cpus=0.5, dtype="bfloat16", max_model_len=512)
    ray.get(engine.ready.remote())

    samples = [(probe[:8], probe[8 + 6 * i : 20 + 6 * i]) for i in range(4)]

    def step() -> None:
        mask = pad_batch(samples, 0).action_mask
        old = policy.call_sharded("compute_logprobs", [samples])[0][0]
        adv = torch.where(torch.arange(len(samples))[:, None] % 2 == 0, 1.0, -1.0).expand_as(old) * mask
        exp = Experience(samples, mask, old_logprobs=old, advantages=adv)
        policy.call_sharded("update", exp.shard(1), PolicyLossConfig(), *exp.num_tokens_and_seqs())

    kwargs = dict(bucket_bytes=args.bucket_mb * 1024**2, tol=args.tol, exact=False, verify_with="trainer_forward")
    syncer = WeightSyncer(policy, [engine], transport="object_store", **kwargs)
    failures = 0
    worst_margin = float("inf")
    try:
        syncer.run(probe)
        cal = syncer.probe
        print(
            f"{args.model} bf16, probe of {len(probe)} tokens, {len(syncer.buckets)} buckets: sync 0 (calibration) "
            f"max |engine - trainer| {cal.disagreement:.3f} nats on identical weights, engine repeat noise "
            f"{cal.repeat_noise:.3g}, RMS {cal.rms_disagreement:.4f}; tolerances from now on: per token "
            f"{cal.token_tol:.3f}, RMS {cal.rms_tol:.4f}"
        )
        for i in range(1, args.syncs + 1):
            step()
            try:
                syncer.run(probe)
                verdict = "pass"
            except WeightSyncError as err:  # a false failure: every sync here is correct
                failures += 1
                verdict = f"FALSE FAILURE: {err}"
            last = syncer.probe.last
            worst = last.get("diff_0", float("nan"))
            worst_margin = min(worst_margin, last.get("token_tol", float("nan")) - worst)
            print(
                f"sync {i:2d}: max |d_engine - d_trainer| {worst:.4f} (tolerance {last.get('token_tol', 0):.3f}; "
                f"old fixed {args.tol:g}: {'fail' if not worst <= args.tol else 'pass'})  trainer moved up to "
                f"{last.get('trainer_move', 0):.4f}  |engine - trainer| {last['absolute']:.3f}  RMS "
                f"{last.get('rms_0', float('nan')):.4f} (tolerance {last.get('rms_tol', 0):.4f})  -> {verdict}"
            )
        print(
            f"{args.syncs} correct syncs: {failures} false failures; smallest margin to the per-token tolerance "
            f"{worst_margin:.3f}"
        )

        # a skipped bucket: the exact check names it; the probe is judged on the engine's stale bucket too
        skips = sorted({len(syncer.buckets) // 2, len(syncer.buckets) - 1} if args.skip is None else {args.skip})
        for skip in [*skips, None]:  # None: no sync at all after the step (the whole update skipped)
            before = copy.deepcopy(syncer.probe)
            step()
            what = "whole sync skipped" if skip is None else f"skipped bucket {skip}"
            if skip is not None:
                names = syncer.buckets[skip]

                class Skipping(WeightSyncer):
                    def engine_loads(self, k, layout, sent, skip=skip):
                        return [] if k == skip else super().engine_loads(k, layout, sent)

                skipper = Skipping(policy, [engine], transport="object_store", **kwargs)
                try:
                    skipper.run(None)
                    print(f"{what}: the exact check did NOT fail")
                except WeightSyncError as err:
                    print(f"{what} ({len(names)} tensors: {names[0]} ...): exact check: {str(err)[:160]}")
            engine_lps = ray.get(engine.prompt_logprobs.remote(probe))
            trainer_lps = policy.call("probe_logprobs", probe)[0]
            try:
                before.check([engine_lps], trainer_lps)
                verdict = "the probe did NOT fail"
            except WeightSyncError as err:
                verdict = f"probe: {err}"
            last = before.last
            print(
                f"{what}: max |d_engine - d_trainer| {last.get('diff_0', float('nan')):.4f} (tolerance "
                f"{last.get('token_tol', 0):.3f}), RMS {last.get('rms_0', float('nan')):.4f} (tolerance "
                f"{last.get('rms_tol', 0):.4f}), trainer moved up to {last.get('trainer_move', 0):.4f}: {verdict}"
            )
            syncer.run(probe)  # the engine whole again
        print("a correct sync after each fault: pass")
    finally:
        ray.get(engine.shutdown.remote())
        ray.kill(engine)
        policy.kill()


if __name__ == "__main__":
    main()

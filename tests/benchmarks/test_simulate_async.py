"""benchmarks/simulate_async.py, the planner's discrete-event model: each mode against a timeline computed by hand
(fixed lengths, one engine), the staleness bound, drops, and the cost of ``partial=recompute``."""

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "simulate_async.py"
_spec = importlib.util.spec_from_file_location("simulate_async", _PATH)
sim = importlib.util.module_from_spec(_spec)
sys.modules["simulate_async"] = sim  # dataclasses resolve the module by name
_spec.loader.exec_module(sim)

# One engine, fixed lengths, everything fits in one batch:
#   4 requests (G = 2 prompts x 2 samples), prompt 5 tokens, response 10 tokens, step_s(b) = 0.1 + 0.05 b
#   gen   = prefill 0.01 * 4 * 5 + 10 iterations * (0.1 + 0.05 * 4) = 0.2 + 3.0 = 3.2
#   train = 0.5 + 0.01 * 4 * (5 + 10) / 1 = 1.1;  sync = 0.7
FIXED = dict(
    steps=3,
    prompts_per_step=2,
    samples_per_prompt=2,
    prompt_len=5,
    lengths=[10],
    max_len=100,
    engines=1,
    trainers=1,
    max_batch=64,
    decode_a_s=0.1,
    decode_c_s=0.05,
    prefill_s_per_token=0.01,
    train_s_per_token=0.01,
    train_step_overhead_s=0.5,
    sync_s=0.7,
)
GEN, TRAIN, SYNC = 3.2, 1.1, 0.7


def run(**kw):
    return sim.simulate(sim.SimParams(**{**FIXED, **kw}))


def test_generate_batch_is_prefill_plus_iterations():
    p = sim.SimParams(**FIXED)
    duration, busy, batch_time = sim.generate_batch(p, [[10, 10], [10, 10]], engines=1)
    assert duration == pytest.approx(GEN)
    assert busy == pytest.approx(GEN)
    assert batch_time == pytest.approx(4 * GEN)  # 4 requests run the whole time


def test_continuous_batching_short_requests_leave_early():
    # lengths 2 and 6, no prefill, step_s(b) = 1 + 1 b: 2 iterations at b = 2 (3 s each), 4 at b = 1 (2 s each) = 14
    p = sim.SimParams(**{**FIXED, "decode_a_s": 1.0, "decode_c_s": 1.0, "prefill_s_per_token": 0.0})
    duration, _, _ = sim.generate_batch(p, [[2, 6]], engines=1)
    assert duration == pytest.approx(2 * 3 + 4 * 2)
    # max_batch = 1: the second request waits for the first: 2 * 2 + 6 * 2 = 16
    p = sim.SimParams(**{**FIXED, "decode_a_s": 1.0, "decode_c_s": 1.0, "prefill_s_per_token": 0.0, "max_batch": 1})
    assert sim.generate_batch(p, [[2, 6]], engines=1)[0] == pytest.approx(16)


def test_sync_split_wall_and_idle_by_hand():
    r = run(mode="sync_split")
    assert r["wall_s"] == pytest.approx(3 * (GEN + TRAIN + SYNC))  # 15.0
    assert r["engine_idle_pct"] == pytest.approx(100 * (TRAIN + SYNC) / 5.0)  # 36 %
    assert r["trainer_idle_pct"] == pytest.approx(100 * (GEN + SYNC) / 5.0)  # 78 %
    assert r["sync_pct"] == pytest.approx(100 * SYNC / 5.0)  # 14 %
    assert (r["trained_samples"], r["trained_tokens"]) == (12, 120)
    assert r["tokens_per_s"] == pytest.approx(120 / 15.0)
    assert r["mean_version_lag"] == 0 and r["max_version_lag"] == 0


def test_one_step_off_wall_by_hand():
    r = run(mode="one_step_off")
    # gen_0 + (S - 1) (max(gen, train) + sync) + train + sync = 3.2 + 2 * 3.9 + 1.8 = 12.8
    assert r["wall_s"] == pytest.approx(GEN + 2 * (max(GEN, TRAIN) + SYNC) + TRAIN + SYNC)
    assert r["mean_version_lag"] == pytest.approx(2 / 3)  # step 0 trains fresh data, steps 1 and 2 one version old
    assert r["max_version_lag"] == 1
    assert r["engine_idle_pct"] == pytest.approx(100 * (1 - 3 * GEN / 12.8))


def test_colocated_gets_every_device_for_both_roles():
    # 2 devices: 2 engines with 2 requests each, 2 trainers
    # gen = 0.01 * 2 * 5 + 10 * (0.1 + 0.05 * 2) = 2.1; train = 0.5 + 0.6 / 2 = 0.8; + sync 0.7 + switch 0.3
    r = run(mode="colocated", colocate_switch_s=0.3)
    assert r["engines"] == 2
    assert r["wall_s"] == pytest.approx(3 * (2.1 + 0.8 + 0.7 + 0.3))


def test_fully_async_equal_costs_approaches_max_of_gen_and_train():
    # c = 0, no prefill: a batch of any size takes 10 iterations * 0.3 = 3 s; train = 3 s; sync 0.
    # sync_split: S (3 + 3); fully async, k = 1: the engines run the next step's groups while the trainer trains,
    # so after the first rollout each step costs max(gen, train) = 3: wall = 3 + S * 3.
    costs = dict(
        decode_a_s=0.3,
        decode_c_s=0.0,
        prefill_s_per_token=0.0,
        train_s_per_token=0.0,
        train_step_overhead_s=3.0,
        sync_s=0.0,
        steps=10,
    )
    split = run(mode="sync_split", **costs)
    fa = run(mode="fully_async", staleness=1, **costs)
    assert split["wall_s"] == pytest.approx(10 * 6.0)
    assert fa["wall_s"] == pytest.approx(3.0 + 10 * 3.0)
    assert fa["trainer_idle_pct"] == pytest.approx(100 * 3.0 / 33.0)  # only the first rollout
    assert fa["max_version_lag"] <= 1 and fa["dropped_samples"] == 0


def test_fully_async_with_k0_is_synchronous():
    r = run(mode="fully_async", staleness=0)
    assert r["wall_s"] == pytest.approx(3 * (GEN + TRAIN + SYNC))
    assert r["max_version_lag"] == 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_version_lag_never_exceeds_k_and_long_tails_drop(k):
    p = dict(
        mode="fully_async",
        staleness=k,
        steps=12,
        prompts_per_step=4,
        samples_per_prompt=4,
        lengths=None,
        length_median=20,
        length_sigma=1.2,
        max_len=400,
        engines=2,
        max_batch=8,
        decode_a_s=0.05,
        decode_c_s=0.01,
        train_s_per_token=0.001,
        train_step_overhead_s=0.5,
        sync_s=0.2,
        seed=3,
    )
    r = sim.simulate(sim.SimParams(**p))
    assert r["max_version_lag"] <= k
    assert r["trained_samples"] == 12 * 4 * 4  # every step gets whole groups, drops are replaced
    assert 0 <= r["engine_idle_pct"] <= 100 and 0 <= r["trainer_idle_pct"] <= 100
    again = sim.simulate(sim.SimParams(**p))
    assert again == r  # deterministic given the seed


def test_a_group_older_than_k_is_dropped_and_counted():
    # one sample per prompt, lengths 50, 1, 1, ...: group 0 takes ~50 iterations while the trainer steps every ~2 s on
    # the 1-token groups, so when it finishes the trainer is more than k = 1 versions ahead: dropped, and replaced.
    r = run(
        mode="fully_async",
        staleness=1,
        steps=10,
        prompts_per_step=1,
        samples_per_prompt=1,
        prompt_len=0,
        lengths=[50] + [1] * 40,
        decode_a_s=0.1,
        decode_c_s=0.0,
        train_s_per_token=0.0,
        train_step_overhead_s=1.0,
        sync_s=1.0,
    )
    assert r["dropped_samples"] == 1
    assert r["trained_samples"] == 10 and r["trained_tokens"] == 10  # only 1-token responses were trained
    assert r["max_version_lag"] <= 1


def test_keep_and_recompute_differ_by_the_recompute_prefill():
    # One engine, a = 1 s, c = 0, prompt 4 tokens, prefill 0.05 s/token, train 1 s, sync 1 s, k = 1, 1 sample/prompt,
    # lengths 20, 1, 1. Timeline (keep):
    #   t=0    g0 (20 tokens), g1 (1 token) admitted: prefill 8 * 0.05 = 0.4, one iteration -> g1 done at 1.4
    #   1.4    train step 0 on g1 until 2.4; g0 decodes alone
    #   2.4    sync: g0 has 2 tokens; the engine stops at the end of its iteration (2.4); sync until 3.4
    #   3.4    version 1; g2 (1 token) admitted at the next iteration (4.4): prefill 0.2 + 1 -> done at 5.6
    #   5.6    train step 1 until 6.6, sync until 7.6 = wall
    # recompute: at 3.4 g0 re-reads prompt + 2 tokens = 6 tokens (0.3 s) first: everything after moves by 0.3.
    common = dict(
        mode="fully_async",
        staleness=1,
        steps=2,
        prompts_per_step=1,
        samples_per_prompt=1,
        prompt_len=4,
        lengths=[20, 1, 1, 1],
        decode_a_s=1.0,
        decode_c_s=0.0,
        prefill_s_per_token=0.05,
        train_s_per_token=0.0,
        train_step_overhead_s=1.0,
        sync_s=1.0,
    )
    keep = run(partial="keep", **common)
    recompute = run(partial="recompute", **common)
    assert keep["wall_s"] == pytest.approx(7.6)
    assert keep["recompute_tokens"] == 0
    assert recompute["recompute_tokens"] == 4 + 2
    assert recompute["wall_s"] == pytest.approx(7.6 + 0.05 * 6)
    assert keep["mean_version_lag"] == recompute["mean_version_lag"] == 0  # g1 and g2 each trained fresh


def test_lognormal_lengths_are_clipped_and_the_same_in_every_mode():
    p = sim.SimParams(length_median=100, length_sigma=2.0, max_len=300, samples_per_prompt=64, seed=1)
    lengths = sim.group_lengths(p, 7)
    assert lengths == sim.group_lengths(sim.SimParams(**{**p.__dict__, "mode": "sync_split"}), 7)
    assert min(lengths) >= 1 and max(lengths) == 300  # sigma 2: some samples reach the cap


def test_cli_prints_every_mode_and_reads_params(tmp_path, capsys):
    path = tmp_path / "costs.json"
    path.write_text('{"steps": 2, "lengths": [8], "sync_overrides": {"train_step_overhead_s": 0.1}}')
    assert sim.main(["--params", str(path), "--staleness", "1"]) == 0
    out = capsys.readouterr().out
    for label in ("colocated", "sync_split", "one_step_off", "fully_async k=1 keep", "fully_async k=1 recompute"):
        assert label in out
    path.write_text('{"stepz": 2}')
    with pytest.raises(SystemExit, match="stepz"):
        sim.main(["--params", str(path)])

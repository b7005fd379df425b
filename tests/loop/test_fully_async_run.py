"""Fully asynchronous RL in the real loop (split placement, one vLLM engine, one DeepSpeed policy rank): the engine
generates continuously while the policy trains, weights are loaded between engine steps with requests in flight,
an eval runs among them, and a run resumed from a checkpoint trains every prompt the first run had not trained,
none twice."""

from __future__ import annotations

import json

import pytest

from reasonrl.exp import BasePPOExp
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

pytestmark = pytest.mark.integration


def _config(tmp_path, name: str, **overrides):
    from playground.tiny_grpo_cpu import TinyGRPOCPUConfig

    return TinyGRPOCPUConfig(
        exp_name=name,
        ckpt_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        colocate_all=False,
        vllm_num_engines=1,
        policy_devices_per_node=1,
        cpus_per_bundle=0.5,
        fully_async=True,
        async_staleness=2,
        rollout_correction="token_tis",
        generate_max_len=96,
        stop=[],
        eval_max_prompts=4,
        eval_before_training=False,
        eval_interval=2,
        save_interval=2,
        max_steps=4,
        dump_generations=64,  # every trained sample
        progress_bar=False,
        **({"resume": "none"} | overrides),
    )


def _trained(log_dir, steps) -> dict[int, list[dict]]:
    return {
        s: [
            record
            for line in (log_dir / "generations" / f"step_{s}.jsonl").read_text().splitlines()
            if (record := json.loads(line))["split"] == "train"  # (the eval's samples are dumped there too)
        ]
        for s in steps
    }


def test_fully_async_trains_with_bounded_staleness_and_resumes_without_training_a_prompt_twice(ray_cluster, tmp_path):
    BasePPOExp(_config(tmp_path, "keep", partial_rollout="keep")).run()
    log = tmp_path / "logs" / "keep"
    rows = metrics_by_step(read_metrics(log / "metrics.jsonl"))
    for step in (1, 2, 3, 4):
        row = rows[step]
        assert row["policy/grad_norm"] > 0 and "policy/rollout_corr/kl_k3" in row
        assert 0 <= row["async/version_lag_mean"] <= row["async/version_lag_max"] <= 2  # the bound, k = 2
        assert row["async/groups_drawn"] >= row["async/groups_trained"] == 4 * step  # rollout_batch_size 4
    assert max(rows[s]["async/version_lag_max"] for s in (2, 3, 4)) >= 1  # generation really ran ahead
    # whether a sync finds requests in flight depends on timing here (the tiny model generates faster than it
    # trains); the engine-level tests interrupt at chosen steps. The mode is respected either way:
    assert all(rows[s]["async/recomputed_requests"] == 0 for s in (1, 2, 3, 4))
    print("kept at each sync:", [rows[s]["async/kept_requests"] for s in (1, 2, 3, 4)])
    assert "eval/gsm8k_test/avg@1" in rows[2]  # an eval among the flow's requests
    trained = _trained(log, (1, 2, 3, 4))
    for step, samples in trained.items():
        for sample in samples:  # every token names the weights that sampled it, never newer than the trained ones
            assert len(sample["token_versions"]) == sample["response_tokens"]
            assert max(sample["token_versions"]) <= step - 1 and step - 1 - min(sample["token_versions"]) <= 2
    ids = [sample["id"] for step in (1, 2, 3, 4) for sample in trained[step][::4]]  # 4 samples per prompt
    assert len(ids) == len(set(ids)) == 16

    # resume from step 2 under recompute: steps 3-4 train prompts the first run's steps 1-2 did not
    BasePPOExp(
        _config(
            tmp_path,
            "resumed",
            partial_rollout="recompute",  # it changes what generates the tokens: named, as a resume requires
            resume=str(tmp_path / "ckpt" / "keep" / "step_2"),
            resume_allow_changes=["partial_rollout"],
        )
    ).run()
    resumed = _trained(tmp_path / "logs" / "resumed", (3, 4))
    first_half = {sample["id"] for step in (1, 2) for sample in trained[step]}
    again = {sample["id"] for step in (3, 4) for sample in resumed[step]}
    assert not first_half & again, "a prompt trained before the checkpoint was trained again after resuming"
    resumed_rows = metrics_by_step(read_metrics(tmp_path / "logs" / "resumed" / "metrics.jsonl"))
    assert all(resumed_rows[s]["async/kept_requests"] == 0 for s in (3, 4))
    assert [resumed_rows[s]["async/groups_trained"] for s in (3, 4)] == [4, 8]  # counted from the resume


def test_the_math_demo_learns_fully_asynchronously(ray_cluster, tmp_path):
    """The learning demo's GRPO recipe under split placement with fully_async at k = 2 raises held-out accuracy
    like the synchronous run: measured (docs/async.md, 30 steps, two seeds) within 3 points of synchronous split
    placement at the same trained samples; here 10 steps must add 8 points (seed 0 measured +13.0: 40.0% -> 53.0%,
    seed 1 +16.5; the synchronous run +13.0 and +15.5; from the warm start's 55-65% band, seed 0: 51.5% -> 68.0%)."""
    from reasonrl.demo import run_rl
    from reasonrl.sft.warm_start import warm_start_path

    warm_start_path(log_dir=str(tmp_path / "warm_start_logs"))  # cached after the first build
    result = run_rl(
        "grpo",
        steps=10,
        seed=0,
        log_dir=str(tmp_path / "logs"),
        ckpt_dir=str(tmp_path / "ckpt"),
        eval_interval=10,
        colocate_all=False,
        cpus_per_bundle=1.0,
        rollout_correction="token_tis",
        fully_async=True,
        async_staleness=2,
    )
    rows = metrics_by_step(read_metrics(result.log_dir / "metrics.jsonl"))
    print(f"fully async math demo: held-out {result.heldout_before:.3f} -> {result.heldout_after:.3f}")
    assert result.heldout_after >= result.heldout_before + 0.08
    assert max(rows[s]["async/version_lag_max"] for s in range(1, 11)) <= 2

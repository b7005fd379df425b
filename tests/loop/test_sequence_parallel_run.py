"""Ulysses sequence parallelism in the real loop: GRPO on the tiny model with the policy and the reference on 2 ZeRO-3
ranks each, ``sequence_parallel_size=2`` (every sequence split over both ranks), beside one vLLM engine.

The trainer's log-probs of the sampled tokens (the SP forward) are compared with the engine's at every step
(``rollout_correction=monitor``), and the weights the SP policy sends are checked by the sync's probe; both as the
other loop tests bound them (fp32 noise between vLLM's kernels and the trainer's). The per-token equality of SP = 2
with SP = 1 is tested at the worker level (tests/distributed/test_distributed_sp_workers.py, 1e-5)."""

from __future__ import annotations

import math

import pytest

from reasonrl.exp import BasePPOExp
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

pytestmark = pytest.mark.integration


def test_grpo_steps_with_the_sequence_split_over_two_ranks(ray_cluster, tmp_path):
    from playground.tiny_grpo_cpu import TinyGRPOCPUConfig

    cfg = TinyGRPOCPUConfig(
        exp_name="sp",
        ckpt_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        colocate_all=False,
        policy_devices_per_node=2,
        ref_devices_per_node=2,
        zero_stage=3,
        sequence_parallel_size=2,
        kl_mode="loss",  # the reference's SP forward reaches the loss
        init_kl_coef=1e-3,
        cpus_per_bundle=0.5,
        rollout_correction="monitor",
        eval_data=[],
        eval_before_training=False,
        eval_interval=0,
        save_interval=0,
        max_steps=2,
        progress_bar=False,
        resume="none",
    )
    BasePPOExp(cfg).run()
    run_dir = tmp_path / "logs" / "sp"
    rows = metrics_by_step(read_metrics(run_dir / "metrics.jsonl"))
    for step in (1, 2):
        row = rows[step]
        # fp32 noise between vLLM's kernels and the trainer's (the other loop tests measure 1e-6 to 5e-5); a wrong
        # split, mask or gather moves log-probs by 0.1 or more
        assert row["policy/rollout_corr/logp_abs_diff_max"] < 1e-3, (step, row)
        assert row["sync/probe_max_abs_diff"] < 1e-4
        assert row["policy/grad_norm"] > 0 and math.isfinite(row["policy/kl"])
    log = (run_dir / "train.log").read_text()
    assert "policy: attention Ulysses over 2 ranks around sdpa" in log
    assert "ref: attention Ulysses over 2 ranks around sdpa" in log

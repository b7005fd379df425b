"""Split placement in the real loop: PPO with a critic on its own devices (critic || policy updates), two vLLM
engines, two ZeRO-3 policy ranks and a learned reward model with another tokenizer, on the tiny model.

Its own module: the loop-feature module's shared stack must be gone first, so this run's bundles fit next to the
session's fixtures on the 8 logical CPUs of the test cluster (bundles of half a CPU).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from reasonrl.exp import BasePPOExp
from reasonrl.run.lifecycle import ExperimentRunner
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

pytestmark = pytest.mark.integration
SCRIPTED_ENV = f"{Path(__file__).parents[1] / 'fixtures' / 'scripted_env.py'}:Countdown"


class _ProbingRunner(ExperimentRunner):
    """Reads every engine's log-probs of a fixed probe after training, before the engines shut down."""

    async def fit(self):
        import ray

        last = await super().fit()
        probe = self.trainer.probe.ids
        self.engine_probes = ray.get([e.prompt_logprobs.remote(list(probe)) for e in self.trainer.roles.engines])
        refs = self.trainer.roles.policy.call_async("compute_logprobs", [(probe[:1], probe[1:])])  # collective
        self.policy_probe = (await asyncio.gather(*refs))[0][0][0].tolist()
        self.spans = dict(self.trainer.updates.spans)
        return last


def test_split_placement_two_engines_two_zero3_ranks_and_a_reward_model(ray_cluster, tmp_path):
    """PPO with a critic on its own devices (critic || policy updates), 2 vLLM engines, 2 ZeRO-3 policy ranks and
    a learned reward model with ANOTHER tokenizer (SmolLM2's: responses are re-tokenised for it)."""
    from playground.tiny_ppo_cpu import TinyPPOCPUConfig

    cfg = TinyPPOCPUConfig(
        exp_name="split",
        ckpt_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        colocate_all=False,
        policy_devices_per_node=2,
        zero_stage=3,
        vllm_num_engines=2,
        reward_num_nodes=1,
        reward_devices_per_node=1,
        reward_pretrain="smollm2",
        cpus_per_bundle=0.5,  # 6 bundles in 3 logical CPUs: the session fixtures hold some of the test cluster
        eval_data=[],
        eval_before_training=False,
        eval_interval=0,
        save_interval=0,
        max_steps=2,
        progress_bar=False,
        resume="none",
    )
    exp = _ProbingRunner(BasePPOExp(cfg))
    exp.run()
    rows = metrics_by_step(read_metrics(tmp_path / "logs" / "split" / "metrics.jsonl"))
    for step in (1, 2):
        row = rows[step]
        assert row["policy/grad_norm"] > 0 and row["critic/grad_norm"] > 0  # both stepped
        # the logged reward is the final one: rule reward + reward-model score, on every sample
        assert row["reward/mean"] == pytest.approx(row["reward/rule_mean"] + row["reward/model_score_mean"], abs=1e-5)
        assert row["reward/model_score_mean"] != 0
    (c0, c1), (p0, p1) = exp.spans["critic"], exp.spans["policy"]
    assert c0 < p1 and p0 < c1, f"critic {exp.spans['critic']} and policy {exp.spans['policy']} did not overlap"
    first, second = exp.engine_probes
    assert first == second  # both engines hold the same weights
    assert max(abs(a - b) for a, b in zip(first, exp.policy_probe, strict=True)) < 1e-4  # ... the policy's


def _async_config(tmp_path, name: str, **overrides):
    from playground.tiny_grpo_cpu import TinyGRPOCPUConfig

    return TinyGRPOCPUConfig(
        exp_name=name,
        ckpt_dir=str(tmp_path / "ckpt"),
        log_dir=str(tmp_path / "logs"),
        colocate_all=False,  # split placement: the engine generates while the policy trains
        vllm_num_engines=1,
        policy_devices_per_node=1,
        cpus_per_bundle=0.5,
        rollout_correction="monitor",
        policy_update_steps=2,  # two optimizer steps: the old log-probs come from a forward pass
        forward_chunk_tokens=200,  # several forward chunks per step ...
        stop=["e"],  # ... and samples that end at different steps: the synchronous run streams its forwards
        env_fn=SCRIPTED_ENV,  # multi-turn: a scripted environment answers each turn (up to 2)
        max_turns=2,
        eval_data=[],
        eval_before_training=False,
        eval_interval=0,
        save_interval=0,
        progress_bar=False,
        resume="none",
        **overrides,
    )


def test_async_staleness_one_overlaps_generation_with_training(ray_cluster, tmp_path):
    """async_staleness=1 under split placement, on multi-turn samples (a scripted environment answers each turn): step
    s trains on data generated one update earlier (step 1 on the starting weights, like the synchronous loop), the
    trainer logs the staleness and the wait, vLLM's log-probs are
    compared with the trainer's for the correction, and the first step equals the synchronous loop's exactly
    (same prompts, seeds and weights: the asynchronous machinery changes nothing but the overlap).

    The synchronous run streams (stream_rollout): its forward chunks start while the engine generates; the
    asynchronous run's start when the step takes its rollout, and a stream_rollout=false run's after its rollout.
    Equal numbers show that streaming changes only when things run."""
    BasePPOExp(_async_config(tmp_path, "async", async_staleness=1, max_steps=3)).run()
    rows = metrics_by_step(read_metrics(tmp_path / "logs" / "async" / "metrics.jsonl"))
    assert [rows[s]["async/staleness"] for s in (1, 2, 3)] == [0.0, 1.0, 1.0]
    for step in (1, 2, 3):
        assert rows[step]["policy/grad_norm"] > 0 and rows[step]["time/wait_rollout"] >= 0
        assert "policy/rollout_corr/kl_k3" in rows[step]
        assert rows[step]["multi_turn/turns_mean"] > 1  # the environment answered: observations masked in the loss
    assert rows[1]["policy/rollout_corr/kl_k3"] < 1e-4  # step 1: the engine holds the trained weights exactly
    assert rows[3]["policy/rollout_corr/kl_k3"] > rows[1]["policy/rollout_corr/kl_k3"]  # one update apart
    for step, version in ((1, 0), (2, 0), (3, 1)):  # each dumped sample names the weights that generated it
        dumped = (tmp_path / "logs" / "async" / "generations" / f"step_{step}.jsonl").read_text().splitlines()
        assert dumped and {json.loads(line)["policy_version"] for line in dumped} == {version}, step

    BasePPOExp(_async_config(tmp_path, "sync", max_steps=1)).run()
    sync = metrics_by_step(read_metrics(tmp_path / "logs" / "sync" / "metrics.jsonl"))[1]
    BasePPOExp(_async_config(tmp_path, "unstreamed", max_steps=1, stream_rollout=False)).run()
    unstreamed = metrics_by_step(read_metrics(tmp_path / "logs" / "unstreamed" / "metrics.jsonl"))[1]
    # equal by construction on any CPU: three runs of one config on this machine (same bundles, threads, kernels), the
    # same step-1 samples, cut into the same forward chunks in sample order (never by timing) and the same update
    # micro-batches. Multi-turn requests join the engine as environments answer, so an engine batch may differ
    # between runs; that moves a float32 log-prob by rounding only, which changes a seeded sample only where the
    # random scores of two tokens tie to within that rounding (the engine's own log-probs are not compared here)
    for key in ("reward/mean", "response/length_mean", "policy/loss", "policy/grad_norm", "policy/approx_kl"):
        assert rows[1][key] == sync[key] == unstreamed[key], key
    assert sync["perf/forward_chunks"] == rows[1]["perf/forward_chunks"] == unstreamed["perf/forward_chunks"] > 1
    # the synchronous streamed run started chunks while its rollout ran (samples end at different engine steps,
    # deterministically for the seeds); the asynchronous run's and the unstreamed run's started after it
    assert sync["perf/forward_chunks_early"] >= 1 and sync["time/forward_overlapped"] > 0.0
    assert rows[1]["perf/forward_chunks_early"] == unstreamed["perf/forward_chunks_early"] == 0.0

"""Ulysses sequence parallelism in the real PPO workers on Ray: 2-rank ZeRO-3 roles over gloo, the tiny model in
float32 (4 query / 2 key-value heads), ``sequence_parallel_size=2`` (one SP group of both ranks, the group rounds
of ``reasonrl.distributed.sp_rounds``) against the same roles at 1 on the same shards.

Micro-batches of ~20 tokens: every shard needs several and the two ranks need different counts, so the rounds run
zero-weighted dummies too. The policy loss is the GRPO-like one with a KL loss and an entropy bonus on a loss mask
with holes; the critic's is the clipped value loss. The reference runs packed micro-batches at SP = 2 and is
compared with plain transformers (padded: another shape, the same 1e-5 as test_distributed_ppo_workers.py).

Tolerance 1e-5 (absolute for log-probs, values and per-token metrics; relative for the gradient norm): SP = 2 does
the same float32 operations grouped differently (matmuls over half the positions, attention two heads at a time,
each micro-batch's gradient summed from two shares by DeepSpeed's reduction), so only reduction order differs.
The gradients the optimizer consumes are compared through their global norm (``grad_norm``, before clipping) and
through the per-rank loss metrics; weights after the AdamW step are not (Adam's first step is ~lr * sign(g)).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from fixtures.token_samples import make_samples

from reasonrl.algos.loss_settings import PolicyLossConfig, PolicyStepCoefs, ValueLossConfig
from reasonrl.dataplane.experience import Experience
from reasonrl.distributed.ppo_workers import CriticWorker, PolicyWorker, ReferenceWorker, WorkerConfig
from reasonrl.distributed.worker_group import WorkerGroup
from reasonrl.models import pad_batch, response_logprobs
from reasonrl.utils.even_split import even_parts

pytestmark = pytest.mark.integration
WORLD, TOL = 2, 1e-5


def stitch(parts: list[torch.Tensor]) -> torch.Tensor:
    width = max(p.shape[1] for p in parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts])


def start(worker_cls, config: WorkerConfig, sp: int) -> WorkerGroup:
    g = WorkerGroup(worker_cls, world_size=WORLD, num_cpus_per_actor=0.5, timeout_s=180)
    g.call("setup", dataclasses.replace(config, sequence_parallel_size=sp))
    return g


def holed_mask(samples) -> torch.Tensor:
    """The response span with a hole (token 1 of every third response): tool output in multi-turn."""
    mask = pad_batch(samples, 0).action_mask.clone()
    mask[::3, 1] = False
    return mask


def assert_same_metrics(a: list[dict], b: list[dict]) -> float:
    """Per-rank metrics equal (each rank keeps its own rounds' metrics); returns the largest difference."""
    worst = 0.0
    for ma, mb in zip(a, b, strict=True):
        assert ma.keys() == mb.keys() and ma["tokens"] == mb["tokens"] > 0
        for key in ma:
            diff = abs(ma[key] - mb[key])
            scale = max(abs(ma[key]), 1.0) if key == "grad_norm" else 1.0
            assert diff <= TOL * scale, (key, ma[key], mb[key])
            worst = max(worst, diff / scale)
    return worst


@pytest.fixture(scope="module")
def config(tiny_model_dir) -> WorkerConfig:
    return WorkerConfig(model_path=str(tiny_model_dir), lr=1e-3, max_tokens_per_micro_batch=20)


def test_policy_sp2_matches_sp1(ray_cluster, config):
    samples = make_samples(7)
    parts = even_parts(list(range(len(samples))), WORLD)
    shards = [[samples[i] for i in p] for p in parts]
    groups = {sp: start(PolicyWorker, config, sp) for sp in (1, 2)}
    try:
        reports = groups[2].call("attention")
        assert [r.get("sequence_parallel_ranks") for r in reports] == [2, 2], reports
        assert "sequence_parallel_ranks" not in groups[1].call("attention")[0]
        out = {sp: g.call_sharded("compute_logprobs", shards, 1.0, True) for sp, g in groups.items()}
        logprobs = {sp: stitch([lp for lp, _ in o]) for sp, o in out.items()}
        entropy = {sp: stitch([e for _, e in o]) for sp, o in out.items()}
        g = torch.Generator().manual_seed(5)
        mask = holed_mask(samples)
        old = (logprobs[1] + 0.05 * torch.randn(logprobs[1].shape, generator=g)) * mask
        adv = torch.randn(len(samples), 1, generator=g).expand_as(old) * mask
        exp = Experience(samples, mask, old_logprobs=old, advantages=adv, ref_logprobs=(old - 0.1) * mask)
        exp_shards = [exp.select(p) for p in parts]
        tokens, seqs = exp.num_tokens_and_seqs()
        coefs = PolicyStepCoefs(kl_loss_coef=0.1, entropy_coef=0.01)
        metrics = {
            sp: g.call_sharded("update", exp_shards, PolicyLossConfig(), tokens, seqs, coefs)
            for sp, g in groups.items()
        }
        after = {sp: stitch([lp for lp, _ in g.call_sharded("compute_logprobs", shards)]) for sp, g in groups.items()}
    finally:
        for g in groups.values():
            g.kill()
    lp_diff = (logprobs[2] - logprobs[1]).abs().max().item()
    ent_diff = (entropy[2] - entropy[1]).abs().max().item()
    worst = assert_same_metrics(metrics[1], metrics[2])
    moved = (after[1] - logprobs[1]).abs()[mask].max().item()
    after_diff = (after[2] - after[1]).abs().max().item()
    print(
        f"policy SP=2 vs SP=1: log-probs {lp_diff:.2e}, entropies {ent_diff:.2e}, update metrics {worst:.2e} "
        f"(grad_norm {metrics[1][0]['grad_norm']:.3f}); after the step: moved {moved:.2e}, diff {after_diff:.2e}"
    )
    assert lp_diff <= TOL and ent_diff <= TOL
    assert logprobs[1][mask].abs().min() > 0  # real log-probs on every scored token
    assert moved > 1e-3  # the step changed the policy
    # the weights after one AdamW step (lr 1e-3): ~lr * sign(g) per entry, so entries whose gradient is ~0 may step
    # differently; measured 6.2e-5 on log-probs the step moved by up to 2.5
    assert after_diff <= 1e-3


def test_reference_and_critic_sp2_match(ray_cluster, config, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    samples = make_samples(8, seed=1)
    parts = even_parts(list(range(len(samples))), WORLD)
    shards = [[samples[i] for i in p] for p in parts]
    # packed micro-batches (one row per micro-batch, sequences kept apart by the segment mask; auto resolves sdpa)
    ref = start(ReferenceWorker, dataclasses.replace(config, packing="on", attn_implementation="auto"), 2)
    try:
        assert [(r["packing"], r["sequence_parallel_ranks"]) for r in ref.call("attention")] == [(True, 2)] * 2
        ref_lp = stitch(ref.call_sharded("compute_logprobs", shards))
    finally:
        ref.kill()
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        expected, _ = response_logprobs(model, pad_batch(samples, 0))
    ref_diff = (ref_lp - expected).abs().max().item()
    assert ref_diff <= TOL

    critics = {sp: start(CriticWorker, config, sp) for sp in (1, 2)}
    try:
        values = {sp: stitch(c.call_sharded("compute_values", shards)) for sp, c in critics.items()}
        mask = holed_mask(samples)
        exp = Experience(samples, mask, old_values=values[1] * mask, returns=torch.ones_like(values[1]) * mask)
        tokens, seqs = exp.num_tokens_and_seqs()
        exp_shards = [exp.select(p) for p in parts]
        metrics = {
            sp: c.call_sharded("update", exp_shards, ValueLossConfig(), tokens, seqs) for sp, c in critics.items()
        }
    finally:
        for c in critics.values():
            c.kill()
    value_diff = (values[2] - values[1]).abs().max().item()
    worst = assert_same_metrics(metrics[1], metrics[2])
    print(
        f"reference SP=2 packed vs transformers: log-probs {ref_diff:.2e}; "
        f"critic SP=2 vs SP=1: values {value_diff:.2e}, update metrics {worst:.2e} "
        f"(grad_norm {metrics[1][0]['grad_norm']:.3f})"
    )
    assert value_diff <= TOL

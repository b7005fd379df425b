"""The step's loss mask from the completions to the workers' losses: a completion's ``loss_mask`` (holes for tool
output) becomes the Experience's ``action_mask``, travels in the ragged shards, and is what the advantages, the
mini-batch token counts and the workers' losses use. Without holes (today's single-turn data) every tensor and
every number is bit-identical to the response-prefix mask the code used before."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from reasonrl.algos import get_policy_loss
from reasonrl.config import BasePPOExpConfig
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.ppo_workers import _loss_mask
from reasonrl.loop.forward_stream import response_experience
from reasonrl.loop.learning_signal import step_advantages
from reasonrl.loop.mini_batches import mini_batch_counts
from reasonrl.models import pad_batch

RESPONSES = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16], [17], [18, 19, 20, 21, 22]]
HOLES = [
    [True, True, False, False, True, True],  # a two-token tool output
    None,  # no mask given: every token
    [True, False, True, False],
    [False],  # nothing to learn from
    [True, True, True, True, False],  # masked at the end
]


def completions(loss_masks=None) -> list[Completion]:
    loss_masks = loss_masks or [None] * len(RESPONSES)
    return [
        Completion(i, 0, [1, 2, 3][: 1 + i % 3], r, "", "stop", loss_mask=m)
        for i, (r, m) in enumerate(zip(RESPONSES, loss_masks, strict=True))
    ]


def fill(exp, seed: int = 0):
    """Every per-token field over the whole response span (what the forwards return), zeros past it."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([len(r) for _, r in exp.samples])
    span = torch.arange(exp.action_mask.shape[1])[None, :] < lengths[:, None]
    fields = {}
    for name in ("old_logprobs", "ref_logprobs", "rollout_logprobs"):
        fields[name] = (torch.randn(span.shape, generator=gen) * 0.1 - 1.0) * span
    fields["old_values"] = torch.randn(span.shape, generator=gen) * span
    return dataclasses.replace(exp, **fields)


def test_without_holes_every_mask_and_count_is_the_response_prefix_bit_for_bit():
    exp, lengths, width = response_experience(completions())
    prefix = torch.arange(width)[None, :] < lengths[:, None]  # what response_experience built before
    assert torch.equal(exp.action_mask, prefix)
    exp = fill(exp)
    exp.advantages = torch.randn(prefix.shape) * prefix
    shard = exp.ragged()
    assert shard.loss_mask is None  # nothing more on the wire
    assert exp.loss_tokens() == lengths.tolist()  # the trainer's mini-batch counts are those of the lengths
    shards, per_rank = [[0, 2, 4], [1, 3]], [[0, 2], [1]]
    assert mini_batch_counts(shards, per_rank, exp.loss_tokens()) == mini_batch_counts(
        shards, per_rank, lengths.tolist()
    )
    # a worker's micro-batch: the loss mask it now uses is the forward's span mask it used before, and so the loss
    idx = [4, 0, 3]
    batch = pad_batch([exp.samples[i] for i in idx], 0)
    mb = shard.subset(idx).to_experience().select(range(3), batch.num_actions)
    new_mask = _loss_mask(batch, mb)
    assert torch.equal(new_mask, batch.action_mask)
    logp = mb.old_logprobs + 0.05
    for name in ("ppo", "gspo", "cispo"):
        old = get_policy_loss(name)(logp, mb.old_logprobs, mb.advantages, batch.action_mask)
        new = get_policy_loss(name)(logp, mb.old_logprobs, mb.advantages, new_mask)
        assert torch.equal(old[0], new[0]) and all(torch.equal(old[1][k], new[1][k]) for k in old[1])


def test_a_completions_loss_mask_reaches_the_workers_micro_batch():
    exp, lengths, width = response_experience(completions(HOLES))
    expected = torch.zeros(len(RESPONSES), width, dtype=torch.bool)
    for i, (r, m) in enumerate(zip(RESPONSES, HOLES, strict=True)):
        expected[i, : len(r)] = torch.tensor(m if m is not None else [True] * len(r))
    assert torch.equal(exp.action_mask, expected)
    assert exp.loss_tokens() == [4, 2, 2, 0, 4] and exp.num_tokens_and_seqs() == (12, 4)
    exp = fill(exp)
    exp.advantages = torch.randn(expected.shape) * expected
    shard = exp.ragged([3, 0, 2])
    assert shard.num_tokens_and_seqs() == (6, 2)
    idx = [1, 2]  # samples 0 and 2 of the step
    batch = pad_batch([shard.samples[i] for i in idx], 0)
    mb = shard.select(idx, batch.num_actions)
    assert torch.equal(_loss_mask(batch, mb), expected[[0, 2], : batch.num_actions])


def test_a_loss_mask_of_the_wrong_length_or_outside_the_span_is_refused():
    bad = completions([[True, False]] + [None] * (len(RESPONSES) - 1))
    with pytest.raises(ValueError, match="completion 0: 2 loss-mask entries for 6 tokens"):
        response_experience(bad)
    exp, _, _ = response_experience(completions())
    batch = pad_batch(exp.samples[:2], 0)
    mb = exp.select([0, 1], batch.num_actions)
    mb.action_mask[1, -1] = True  # sample 1 has two tokens
    with pytest.raises(ValueError, match="not within the response span"):
        _loss_mask(batch, mb)


@pytest.mark.parametrize("estimator", ["gae", "grpo", "reinforce_plus_plus"])
def test_step_advantages_with_holes_equal_those_of_the_responses_without_the_masked_tokens(estimator):
    """KL folded into the rewards, the outcome at the last loss token, the estimator and the batch whitening: the
    masked tokens are absent from all of them."""
    exp = fill(response_experience(completions(HOLES))[0], seed=1)
    cfg = BasePPOExpConfig(advantage_estimator=estimator, kl_mode="reward", gamma=0.99, lam=0.95)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.5, 0.0])
    kw = dict(rewards=rewards, group_ids=[0, 0, 0, 1, 1], kl_coef=0.1)

    def fields(e):
        return dict(old_logprobs=e.old_logprobs, ref_logprobs=e.ref_logprobs, values=e.old_values)

    out = step_advantages(cfg, action_mask=exp.action_mask, **fields(exp), **kw)
    compacted = [
        ([1], [t for t, keep in zip(r, exp.action_mask[i].tolist(), strict=False) if keep])
        for i, (_, r) in enumerate(exp.samples)
    ]
    c_mask = torch.arange(exp.action_mask.shape[1])[None, :] < exp.action_mask.sum(-1, keepdim=True)

    def squeeze(x):
        out = torch.zeros_like(x)
        for i in range(x.shape[0]):
            kept = x[i][exp.action_mask[i]]
            out[i, : len(kept)] = kept
        return out

    assert [len(r) for _, r in compacted] == exp.loss_tokens()
    c_out = step_advantages(cfg, action_mask=c_mask, **{k: squeeze(v) for k, v in fields(exp).items()}, **kw)
    assert (out.advantages[~exp.action_mask] == 0).all()
    torch.testing.assert_close(squeeze(out.advantages), c_out.advantages)
    torch.testing.assert_close(squeeze(out.returns), c_out.returns)
    assert out.kl == pytest.approx(c_out.kl) and out.metrics.keys() == c_out.metrics.keys()
    for key in out.metrics:
        assert out.metrics[key] == pytest.approx(c_out.metrics[key], rel=1e-5, abs=1e-6), key

"""Loss masks with holes (tool output inside a response): every piece of math that takes the mask treats a masked
token as absent. For each, a batch with holes gives on its loss tokens exactly what the same batch gives with the
masked tokens REMOVED (compacted to the left): losses and their gradients, token / sequence counts, KL, entropy,
rollout correction, whitening and the advantages (GAE skips the masked tokens: the recursion runs over the loss
tokens only, as verl's ``compute_gae_advantage_return`` of multi-turn training does)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import (
    AGG_MODES,
    POLICY_LOSSES,
    aggregate_loss,
    compute_advantages,
    count_tokens_and_seqs,
    entropy_bonus,
    get_policy_loss,
    kl_loss,
    rollout_correction,
    value_loss,
)

B, T = 6, 9


def holes_mask(seed: int = 0) -> torch.Tensor:
    """[B, T]: right-padded responses with masked spans inside them; one response fully masked, one masked at its
    end, one with no hole."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([9, 7, 5, 8, 3, 6])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mask &= ~(torch.rand(B, T, generator=gen) < 0.3)
    mask[0, 2:4] = False  # a tool output of two tokens
    mask[1, 6] = False  # masked at the end of its response
    mask[4] = False  # no loss token at all
    mask[5, :6] = True  # no hole
    return mask


def compact(x: torch.Tensor, mask: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """The loss tokens of each row moved to the left, in order; ``fill`` after them. [B, T] -> [B, T]."""
    out = torch.full_like(x, fill)
    for i in range(x.shape[0]):
        kept = x[i][mask[i]]
        out[i, : len(kept)] = kept
    return out


def compact_mask(mask: torch.Tensor) -> torch.Tensor:
    return torch.arange(mask.shape[1])[None, :] < mask.sum(-1, keepdim=True)


def randn(seed: int, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(B, T, generator=torch.Generator().manual_seed(seed))


def garbage(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` with large values on the masked tokens: whatever sits there must not matter."""
    return torch.where(mask, x, torch.full_like(x, 37.0))


@pytest.mark.parametrize("agg_mode", AGG_MODES)
@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_policy_losses_with_holes_equal_the_compacted_batch_and_masked_tokens_get_no_gradient(name, agg_mode):
    mask = holes_mask()
    old, adv = randn(1, 0.3) - 1.0, randn(2)
    logp = (old + randn(3, 0.1)).requires_grad_()
    agg = dict(agg_mode=agg_mode, norm_constant=T if agg_mode == "seq-mean-token-sum-norm" else None)
    loss, metrics = get_policy_loss(name)(logp, garbage(old, mask), garbage(adv, mask), mask, **agg)
    (grad,) = torch.autograd.grad(loss, logp)
    assert (grad[~mask] == 0).all()  # masked tokens: zero gradient
    c_mask = compact_mask(mask)
    c_logp = compact(logp.detach(), mask).requires_grad_()
    c_loss, c_metrics = get_policy_loss(name)(c_logp, compact(old, mask), compact(adv, mask), c_mask, **agg)
    (c_grad,) = torch.autograd.grad(c_loss, c_logp)
    assert_close(loss, c_loss)
    assert_close(compact(grad, mask), c_grad)
    for key in metrics:
        assert_close(metrics[key], c_metrics[key], msg=key)


def test_token_mean_counts_only_loss_tokens():
    mask = holes_mask()
    loss_mat = torch.ones(B, T)
    assert count_tokens_and_seqs(mask) == (int(mask.sum()), B - 1)  # the fully masked row is no sequence
    assert_close(aggregate_loss(loss_mat, mask, "token-mean"), torch.tensor(1.0))  # sum over N_tok / N_tok
    per_seq = aggregate_loss(loss_mat, mask, "seq-mean-token-sum")
    assert_close(per_seq, torch.tensor(float(mask.sum()) / (B - 1)))
    assert_close(aggregate_loss(loss_mat, mask, "seq-mean-token-mean"), torch.tensor(1.0))


@pytest.mark.parametrize("agg_mode", AGG_MODES)
def test_value_kl_and_entropy_terms_with_holes_equal_the_compacted_batch(agg_mode):
    mask = holes_mask(1)
    c_mask = compact_mask(mask)
    agg = dict(agg_mode=agg_mode, norm_constant=T if agg_mode == "seq-mean-token-sum-norm" else None)
    values, old_values, returns = randn(4).requires_grad_(), randn(5), randn(6)
    loss, _ = value_loss(values, garbage(old_values, mask), garbage(returns, mask), mask, **agg)
    c_values = compact(values.detach(), mask).requires_grad_()
    c_loss, _ = value_loss(c_values, compact(old_values, mask), compact(returns, mask), c_mask, **agg)
    assert_close(loss, c_loss)
    (grad,) = torch.autograd.grad(loss, values)
    (c_grad,) = torch.autograd.grad(c_loss, c_values)
    assert (grad[~mask] == 0).all() and torch.equal(compact(grad, mask), c_grad)

    logp, ref = randn(7, 0.2) - 1.0, randn(8, 0.2) - 1.0
    kl, kl_m = kl_loss(logp, garbage(ref, mask), mask, estimator="k3", **agg)
    c_kl, c_kl_m = kl_loss(compact(logp, mask), compact(ref, mask), c_mask, estimator="k3", **agg)
    assert_close(kl, c_kl) and assert_close(kl_m["kl"], c_kl_m["kl"])
    entropy = randn(9).abs()
    bonus, ent_m = entropy_bonus(garbage(entropy, mask), mask, 0.01, **agg)
    c_bonus, c_ent_m = entropy_bonus(compact(entropy, mask), c_mask, 0.01, **agg)
    assert_close(bonus, c_bonus) and assert_close(ent_m["entropy"], c_ent_m["entropy"])


@pytest.mark.parametrize("mode", ["none", "token_tis", "seq_tis", "token_mis", "seq_mis", "geo_mis"])
def test_rollout_correction_with_holes_equals_the_compacted_batch(mode):
    """Sequence-level ratios are products over the loss tokens only: a tool's tokens were not sampled by the
    policy, so the engine's log-probs there (whatever they are) must not enter them."""
    mask = holes_mask(2)
    old, rollout = randn(10, 0.05) - 1.0, randn(10, 0.05) - 1.0 + randn(11, 0.02)
    bounds = dict(lower=0.999, upper=1.001) if mode == "geo_mis" else {}
    weights, keep, metrics = rollout_correction(old, garbage(rollout, mask), mask, mode, 2.0, **bounds)
    c_mask = compact_mask(mask)
    c_weights, c_keep, c_metrics = rollout_correction(
        compact(old, mask), compact(rollout, mask), c_mask, mode, 2.0, **bounds
    )
    assert (weights[~mask] == 0).all() and not keep[~mask].any()
    assert_close(compact(weights, mask), c_weights)
    assert torch.equal(compact(keep.float(), mask).bool(), c_keep)
    assert metrics.keys() == c_metrics.keys()
    for key in metrics:
        assert metrics[key] == pytest.approx(c_metrics[key], rel=1e-5, abs=1e-7), key


def verl_gae(token_level_rewards, values, response_mask, gamma, lam):
    """verl's ``compute_gae_advantage_return`` (multi-turn version), its loop as written there, without the
    whitening: at an observation token (mask 0) ``nextvalues`` and ``lastgaelam`` are carried through unchanged."""
    nextvalues, lastgaelam, advantages_reversed = 0, 0, []
    response_mask = response_mask.float()
    for t in reversed(range(token_level_rewards.shape[-1])):
        delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * response_mask[:, t] + (1 - response_mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * response_mask[:, t] + (1 - response_mask[:, t]) * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    return advantages, advantages + values


def verl_masked_whiten(values, mask):
    """verl's ``masked_whiten``: (x - mean) * rsqrt(var + 1e-8), unbiased masked variance."""
    mask = mask.float()
    mean = (values * mask).sum() / mask.sum()
    var = (((values - mean) ** 2) * mask).sum() / mask.sum() * (mask.sum() / (mask.sum() - 1))
    return (values - mean) * torch.rsqrt(var + 1e-8)


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_with_holes_is_verls_multi_turn_gae_and_the_gae_of_the_compacted_batch(gamma, lam):
    mask = holes_mask(3)
    rewards = torch.where(mask, randn(12, 0.1), 0.0)  # verl's token rewards are 0 on observation tokens
    rewards[torch.arange(B), (mask * torch.arange(T)).argmax(-1)] += 1.0  # an outcome at each last loss token
    values = randn(13)
    adv, ret = compute_advantages(
        "gae", token_rewards=rewards, action_mask=mask, values=garbage(values, mask), gamma=gamma, lam=lam
    )
    ref_adv, ref_ret = verl_gae(rewards.double(), values.double(), mask, gamma, lam)
    assert_close(adv[mask].double(), ref_adv[mask], rtol=1e-5, atol=1e-6)
    assert_close(ret[mask].double(), ref_ret[mask], rtol=1e-5, atol=1e-6)
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()  # verl leaves the carried value there; unused
    c_mask = compact_mask(mask)
    compacted = dict(token_rewards=compact(rewards, mask), action_mask=c_mask, values=compact(values, mask))
    c_adv, c_ret = compute_advantages("gae", **compacted, gamma=gamma, lam=lam)
    assert_close(compact(adv, mask), c_adv) and assert_close(compact(ret, mask), c_ret)
    # whitening over the loss tokens only, as verl's
    white, _ = compute_advantages(
        "gae", whiten=True, token_rewards=rewards, action_mask=mask, values=values, gamma=gamma, lam=lam
    )
    assert_close(white[mask].double(), verl_masked_whiten(ref_adv, mask)[mask], rtol=1e-4, atol=1e-5)


def test_gae_with_a_hole_hand_computed():
    """One response [a0, tool, tool, a1, a2] (mask 1 0 0 1 1), outcome 1 at a2, gamma = 0.9, lam = 0.8: the
    recursion over (a0, a1, a2), the tool tokens skipped."""
    mask = torch.tensor([[True, False, False, True, True]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 9.0, 9.0, 0.6, 0.7]])
    adv, ret = compute_advantages("gae", token_rewards=rewards, action_mask=mask, values=values, gamma=0.9, lam=0.8)
    d2 = 1.0 - 0.7  # r + gamma * 0 - V(a2)
    d1 = 0.9 * 0.7 - 0.6  # V_next(a1) = V(a2)
    d0 = 0.9 * 0.6 - 0.5  # V_next(a0) = V(a1): the tool tokens' values are skipped
    a2, a1 = d2, d1 + 0.72 * d2
    a0 = d0 + 0.72 * a1
    assert_close(adv, torch.tensor([[a0, 0.0, 0.0, a1, a2]]))
    assert_close(ret, torch.tensor([[a0 + 0.5, 0.0, 0.0, a1 + 0.6, a2 + 0.7]]))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_outcome_estimators_with_holes_equal_the_compacted_batch(name):
    mask = holes_mask(4)
    rewards = torch.where(mask, randn(14, 0.1), 0.0)
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1])
    kw = dict(group_ids=group_ids, gamma=0.95)
    adv, ret = compute_advantages(name, whiten=True, token_rewards=garbage(rewards, mask), action_mask=mask, **kw)
    c_adv, c_ret = compute_advantages(
        name, whiten=True, token_rewards=compact(rewards, mask), action_mask=compact_mask(mask), **kw
    )
    assert (adv[~mask] == 0).all()
    assert_close(compact(adv, mask), c_adv) and assert_close(compact(ret, mask), c_ret)

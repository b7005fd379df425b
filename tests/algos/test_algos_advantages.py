"""Advantage estimators: hand-computed cases, properties (GRPO zero group mean, RLOO leave-one-out, GAE with
gamma = lambda = 1), masking, whitening and error cases."""

import math

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import (
    ADVANTAGE_ESTIMATORS,
    BASELINE_ESTIMATORS,
    WHITENED_BY_DEFINITION,
    compute_advantages,
    get_advantage_estimator,
    group_stats,
    masked_whiten,
    outcome_to_token_rewards,
)
from reasonrl.algos.advantages import discounted_reverse_cumsum

# Scores and groups used by several hand-computed cases: non-contiguous groups of sizes 3, 2 and 1.
GROUP_IDS = torch.tensor([5, 2, 5, 9, 2, 5])
SCORES = torch.tensor([1.0, 2.0, 0.0, 5.0, 4.0, 0.0])
MASK6 = torch.tensor(
    [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.long
)


def _per_token(per_sample, mask):
    return torch.tensor(per_sample)[:, None] * mask.float()


def _run(name, **kwargs):
    return get_advantage_estimator(name)(**kwargs)


def _random_batch(batch=12, seq=7, seed=0, num_groups=4):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, seq + 1, (batch,), generator=gen)
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()
    rewards = torch.randint(0, 2, (batch,), generator=gen).float() + 0.1 * torch.randn(batch, generator=gen)
    group_ids = torch.randint(0, num_groups, (batch,), generator=gen) * 10 + 3  # arbitrary, unsorted ids
    values = torch.randn(batch, seq, generator=gen)
    return mask, rewards, group_ids, values


# ----------------------------------------------------------------------------------------------------------- GAE


def test_gae_hand_computed():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    values = torch.tensor([[0.5, 0.6, 0.7], [1.0, 0.5, 9.0]])
    adv, ret = _run("gae", token_rewards=rewards, action_mask=mask, values=values, gamma=0.9, lam=0.8)
    # row 0: d2 = 1 - .7 = .3 ; d1 = .9*.7 - .6 = .03 ; d0 = .9*.6 - .5 = .04 ; gl = .72
    a2, a1 = 0.3, 0.03 + 0.72 * 0.3
    a0 = 0.04 + 0.72 * a1
    # row 1: d1 = 2 - .5 = 1.5 ; d0 = .9*.5 - 1 = -.55 ; the padded value 9.0 is never used
    b1 = 1.5
    b0 = -0.55 + 0.72 * b1
    assert_close(adv, torch.tensor([[a0, a1, a2], [b0, b1, 0.0]]))
    assert_close(ret, torch.tensor([[a0 + 0.5, a1 + 0.6, a2 + 0.7], [b0 + 1.0, b1 + 0.5, 0.0]]))
    # the same outcome rewards given as [batch] scalars are placed at the last valid token
    adv2, ret2 = _run(
        "gae", token_rewards=torch.tensor([1.0, 2.0]), action_mask=mask, values=values, gamma=0.9, lam=0.8
    )
    assert_close(adv2, adv)
    assert_close(ret2, ret)


def test_gae_gamma_lambda_one_gives_reward_minus_value():
    mask, rewards, _, values = _random_batch()
    adv, ret = _run("gae", token_rewards=rewards, action_mask=mask, values=values, gamma=1.0, lam=1.0)
    valid = mask.bool()
    expected_adv = (rewards[:, None] - values) * mask
    assert_close(adv, expected_adv)
    assert_close(ret, rewards[:, None].expand_as(ret) * mask)
    assert (adv[~valid] == 0).all() and (ret[~valid] == 0).all()


def test_gae_skips_masked_holes_like_removed_tokens():
    # a multi-turn row: position 1 is tool output (masked); valid tokens must match the compacted sequence
    mask = torch.tensor([[1, 0, 1, 1]])
    rewards = torch.tensor([[0.1, 5.0, -0.2, 1.0]])  # 5.0 sits on a masked token: ignored
    values = torch.tensor([[0.3, 7.0, 0.4, 0.8]])
    adv, ret = _run("gae", token_rewards=rewards, action_mask=mask, values=values, gamma=0.95, lam=0.9)
    c_adv, c_ret = _run(
        "gae",
        token_rewards=torch.tensor([[0.1, -0.2, 1.0]]),
        action_mask=torch.ones(1, 3),
        values=torch.tensor([[0.3, 0.4, 0.8]]),
        gamma=0.95,
        lam=0.9,
    )
    assert_close(adv[:, [0, 2, 3]], c_adv)
    assert_close(ret[:, [0, 2, 3]], c_ret)
    assert adv[0, 1] == 0 and ret[0, 1] == 0


def _explicit_gae(rewards, values, gamma, lam):
    """Textbook GAE on one unpadded sequence, python floats."""
    n = len(rewards)
    adv = [0.0] * n
    running = 0.0
    for t in reversed(range(n)):
        next_v = values[t + 1] if t + 1 < n else 0.0
        running = rewards[t] + gamma * next_v - values[t] + gamma * lam * running
        adv[t] = running
    return adv


def test_gae_matches_explicit_loop_on_random_batch():
    mask, rewards, _, values = _random_batch(seed=3)
    token_rewards = outcome_to_token_rewards(rewards, mask) - 0.01 * torch.rand(mask.shape) * mask
    adv, _ = _run("gae", token_rewards=token_rewards, action_mask=mask, values=values, gamma=0.99, lam=0.95)
    for i in range(mask.shape[0]):
        n = int(mask[i].sum())
        expected = _explicit_gae(token_rewards[i, :n].tolist(), values[i, :n].tolist(), 0.99, 0.95)
        assert_close(adv[i, :n], torch.tensor(expected))


def _loop_gae(rewards, values, mask, gamma, lam):
    """The original per-token loop of ``gae_advantages`` (reference for the vectorised version)."""
    mask = mask.bool()
    rewards = torch.where(mask, rewards, torch.zeros_like(rewards))
    batch, seq = mask.shape
    advantages = torch.zeros(batch, seq, dtype=rewards.dtype)
    next_value = torch.zeros(batch, dtype=rewards.dtype)
    next_adv = torch.zeros(batch, dtype=rewards.dtype)
    for t in reversed(range(seq)):
        valid = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        next_adv = torch.where(valid, adv_t, next_adv)
        next_value = torch.where(valid, values[:, t], next_value)
        advantages[:, t] = torch.where(valid, adv_t, torch.zeros_like(adv_t))
    returns = torch.where(mask, advantages + values, torch.zeros_like(advantages))
    return advantages, returns


def _loop_reward_to_go(rewards, mask, gamma):
    """The original per-token loop of ``_reward_to_go`` (reinforce_plus_plus, remax)."""
    mask = mask.bool()
    out = torch.zeros(mask.shape, dtype=rewards.dtype)
    running = torch.zeros(mask.shape[0], dtype=rewards.dtype)
    for t in reversed(range(mask.shape[1])):
        g_t = rewards[:, t] + gamma * running
        running = torch.where(mask[:, t], g_t, running)
        out[:, t] = torch.where(mask[:, t], g_t, torch.zeros_like(g_t))
    return out


def _random_mask(batch, seq, kind, gen):
    """Right-padded prefixes, or masks with holes (multi-turn), or left padding, with some empty rows."""
    lengths = torch.randint(0, seq + 1, (batch,), generator=gen)
    prefix = torch.arange(seq)[None, :] < lengths[:, None]
    if kind == "prefix":
        return prefix
    if kind == "left":
        return prefix.flip(1)
    holes = torch.rand(batch, seq, generator=gen) < 0.3
    return prefix & ~holes


def _close_to_reference(actual, expected, rtol=1e-5):
    """fp32 tolerance relative to the magnitude of the row (cancellation makes single entries small)."""
    scale = expected.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
    assert ((actual - expected).abs() <= rtol * scale).all(), (actual - expected).abs().max()


@pytest.mark.parametrize("kind", ["prefix", "holes", "left"])
@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 1.0), (0.99, 0.95), (0.5, 0.0), (0.9, 1.0)])
@pytest.mark.parametrize(("batch", "seq"), [(7, 1), (16, 37), (5, 3000)])
def test_gae_vectorised_matches_the_token_loop(kind, gamma, lam, batch, seq):
    gen = torch.Generator().manual_seed(batch * seq + int(100 * gamma) + int(10 * lam))
    mask = _random_mask(batch, seq, kind, gen)
    rewards = 0.01 * torch.randn(batch, seq, generator=gen) + (torch.rand(batch, seq, generator=gen) < 0.01)
    values = torch.randn(batch, seq, generator=gen)
    adv, ret = _run("gae", token_rewards=rewards, action_mask=mask, values=values, gamma=gamma, lam=lam)
    ref_adv, ref_ret = _loop_gae(rewards.double(), values.double(), mask, gamma, lam)
    _close_to_reference(adv.double(), ref_adv)
    _close_to_reference(ret.double(), ref_ret)
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()
    loop_adv, _ = _loop_gae(rewards, values, mask, gamma, lam)  # the old fp32 loop: same answer
    _close_to_reference(adv, loop_adv)


@pytest.mark.parametrize("kind", ["prefix", "holes"])
@pytest.mark.parametrize("gamma", [1.0, 0.99, 0.5])
def test_reward_to_go_vectorised_matches_the_token_loop(kind, gamma):
    gen = torch.Generator().manual_seed(11)
    mask = _random_mask(9, 500, kind, gen)
    rewards = torch.randn(9, 500, generator=gen)
    ret = _run("reinforce_plus_plus", token_rewards=rewards, action_mask=mask, gamma=gamma)[1]
    ref = _loop_reward_to_go(torch.where(mask, rewards, 0.0).double(), mask, gamma)
    _close_to_reference(ret.double(), ref)


@pytest.mark.parametrize("discount", [1.0, 0.999, 0.9405, 0.3, 0.0])
def test_discounted_reverse_cumsum_is_stable_on_long_sequences(discount):
    """float64 check of the doubling scan: 20000 tokens, error close to float64 rounding, nothing overflows."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 20000, generator=gen, dtype=torch.float64)
    y = discounted_reverse_cumsum(x, discount)
    expected = torch.zeros_like(x)
    running = torch.zeros(3, dtype=torch.float64)
    for t in reversed(range(x.shape[1])):
        running = x[:, t] + discount * running
        expected[:, t] = running
    assert torch.isfinite(y).all()
    _close_to_reference(y, expected, rtol=1e-11)


# ---------------------------------------------------------------------------------------------------------- GRPO


def test_grpo_hand_computed_unbiased_std_and_singleton():
    adv, ret = _run("grpo", token_rewards=SCORES, action_mask=MASK6, group_ids=GROUP_IDS, eps=0.0)
    # group 5: scores [1, 0, 0]: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    s5 = math.sqrt(1 / 3)
    # group 2: scores [2, 4]: mean 3, unbiased std sqrt(2); group 9 is a singleton -> 0
    s2 = math.sqrt(2)
    expected = [(2 / 3) / s5, -1 / s2, (-1 / 3) / s5, 0.0, 1 / s2, (-1 / 3) / s5]
    assert_close(adv, _per_token(expected, MASK6))
    assert_close(ret, adv)


def test_grpo_eps_is_added_to_std():
    scores = torch.tensor([1.0, 0.0])
    adv, _ = _run("grpo", token_rewards=scores, action_mask=torch.ones(2, 1), group_ids=torch.tensor([0, 0]), eps=0.5)
    std = math.sqrt(0.5)  # unbiased std of [1, 0]
    assert_close(adv[:, 0], torch.tensor([0.5 / (std + 0.5), -0.5 / (std + 0.5)]))


def test_dr_grpo_and_norm_by_std_false_only_center():
    expected = [2 / 3, -1.0, -1 / 3, 0.0, 1.0, -1 / 3]
    for name, kwargs in [("grpo", {"norm_by_std": False}), ("dr_grpo", {"norm_by_std": True})]:
        adv, _ = _run(name, token_rewards=SCORES, action_mask=MASK6, group_ids=GROUP_IDS, **kwargs)
        assert_close(adv, _per_token(expected, MASK6))


def test_grpo_group_means_are_zero_and_zero_variance_groups_get_zero():
    mask, rewards, group_ids, _ = _random_batch(batch=40, seed=1, num_groups=6)
    rewards[group_ids == group_ids[0]] = 1.0  # force one zero-variance group
    adv, _ = _run("grpo", token_rewards=rewards, action_mask=mask, group_ids=group_ids)
    per_sample = adv[:, 0]  # every row has >= 1 valid token
    for g in group_ids.unique():
        in_group = group_ids == g
        assert abs(per_sample[in_group].mean().item()) < 1e-5
    assert (per_sample[group_ids == group_ids[0]] == 0).all()


def test_grpo_token_level_rewards_are_summed_per_sequence():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    token_rewards = torch.tensor([[0.0, -0.5, 1.0], [0.25, 0.25, 100.0]])  # 100 is on a pad: ignored
    adv, _ = _run("dr_grpo", token_rewards=token_rewards, action_mask=mask, group_ids=torch.tensor([1, 1]))
    # scores 0.5 and 0.5 -> mean 0.5 -> zero advantages
    assert_close(adv, torch.zeros(2, 3))


# ---------------------------------------------------------------------------------------------------------- RLOO


def test_rloo_hand_computed():
    adv, ret = _run("rloo", token_rewards=SCORES, action_mask=MASK6, group_ids=GROUP_IDS)
    # group 5 [1, 0, 0]: 1 - 0, 0 - 0.5, 0 - 0.5 ; group 2 [2, 4]: -2, 2 ; singleton: 0
    assert_close(adv, _per_token([1.0, -2.0, -0.5, 0.0, 2.0, -0.5], MASK6))
    assert_close(ret, adv)


def test_rloo_equals_score_minus_mean_of_others():
    mask, rewards, group_ids, _ = _random_batch(batch=30, seed=2, num_groups=5)
    adv, _ = _run("rloo", token_rewards=rewards, action_mask=mask, group_ids=group_ids)
    for i in range(len(rewards)):
        others = [rewards[j].item() for j in range(len(rewards)) if j != i and group_ids[j] == group_ids[i]]
        expected = rewards[i].item() - sum(others) / len(others) if others else 0.0
        assert abs(adv[i, 0].item() - expected) < 1e-5


# ---------------------------------------------------------------------------------------------------- REINFORCE++


def _explicit_whiten(xs):
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


def _explicit_scale(xs):
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return [x / math.sqrt(var + 1e-8) for x in xs]


def test_reinforce_plus_plus_hand_computed():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    token_rewards = torch.tensor([[0.0, -0.1, 1.0], [0.5, 0.0, 3.0]])  # 3.0 on a pad: ignored
    adv, ret = _run("reinforce_plus_plus", token_rewards=token_rewards, action_mask=mask, gamma=0.5)
    # row 0: G2 = 1, G1 = -0.1 + 0.5 = 0.4, G0 = 0 + 0.2 = 0.2 ; row 1: G1 = 0, G0 = 0.5
    assert_close(ret, torch.tensor([[0.2, 0.4, 1.0], [0.5, 0.0, 0.0]]))
    w = _explicit_whiten([0.2, 0.4, 1.0, 0.5, 0.0])
    assert_close(adv, torch.tensor([[w[0], w[1], w[2]], [w[3], w[4], 0.0]]))


def test_reinforce_plus_plus_baseline_hand_computed():
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]])
    scores = torch.tensor([1.0, 0.0, 3.0, 7.0])
    group_ids = torch.tensor([0, 0, 1, 2])  # group 1 and 2 are singletons -> centred score 0
    adv, ret = _run("reinforce_plus_plus_baseline", token_rewards=scores, action_mask=mask, group_ids=group_ids)
    # centred: [0.5, -0.5, 0, 0] -> tokens [0.5, 0.5, -0.5, 0, 0, 0] then scaled (not shifted) over the 6 tokens
    w = _explicit_scale([0.5, 0.5, -0.5, 0.0, 0.0, 0.0])
    assert_close(adv, torch.tensor([[w[0], w[1]], [w[2], 0.0], [w[3], w[4]], [w[5], 0.0]]))
    assert adv[2:].abs().max() == 0  # singleton groups stay exactly 0
    assert_close(ret, adv)


# --------------------------------------------------------------------------------------------------------- ReMax


def test_remax_hand_computed():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    token_rewards = torch.tensor([[-0.1, -0.1, 0.9], [0.0, 1.0, 0.0]])
    baseline = torch.tensor([0.4, 1.0])
    adv, ret = _run("remax", token_rewards=token_rewards, action_mask=mask, baseline_rewards=baseline)
    assert_close(ret, torch.tensor([[0.7, 0.8, 0.9], [1.0, 1.0, 0.0]]))
    assert_close(adv, torch.tensor([[0.3, 0.4, 0.5], [0.0, 0.0, 0.0]]))


# ------------------------------------------------------------------------------------------- common properties


def _inputs_for(name, mask, rewards, group_ids, values):
    return {
        "token_rewards": outcome_to_token_rewards(rewards, mask) - 0.01 * mask,
        "action_mask": mask,
        "values": values,
        "group_ids": group_ids,
        "baseline_rewards": rewards.flip(0),
        "gamma": 0.9,
        "lam": 0.95,
    }


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_masked_positions_never_contribute(name):
    mask, rewards, group_ids, values = _random_batch(seed=4)
    clean = _inputs_for(name, mask, rewards, group_ids, values)
    adv, ret = _run(name, **clean)
    dirty = dict(clean)
    pad = ~mask.bool()
    dirty["token_rewards"] = clean["token_rewards"].masked_fill(pad, float("nan"))
    dirty["values"] = values.masked_fill(pad, 1e6)
    adv2, ret2 = _run(name, **dirty)
    assert_close(adv2, adv)
    assert_close(ret2, ret)
    assert (adv[pad] == 0).all() and (ret[pad] == 0).all()
    assert adv.dtype == torch.float32 and adv.shape == mask.shape


@pytest.mark.parametrize("name", sorted(ADVANTAGE_ESTIMATORS))
def test_all_estimators_share_one_signature(name):
    mask, rewards, group_ids, values = _random_batch(seed=5)
    # the trainer passes everything; unused inputs must be accepted and ignored
    adv, ret = compute_advantages(name, **_inputs_for(name, mask, rewards, group_ids, values), eps=1e-6)
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()


def test_compute_advantages_whitening():
    mask, rewards, group_ids, values = _random_batch(seed=6)
    raw, raw_ret = compute_advantages("gae", token_rewards=rewards, action_mask=mask, values=values)
    adv, ret = compute_advantages("gae", whiten=True, token_rewards=rewards, action_mask=mask, values=values)
    valid = adv[mask.bool()]
    assert abs(valid.mean().item()) < 1e-5
    assert abs(valid.std().item() - 1.0) < 1e-4  # unbiased std of the valid tokens is 1
    assert (adv[~mask.bool()] == 0).all()
    assert_close(ret, raw_ret)  # returns (critic targets) are never whitened
    # estimators that whiten by definition are not whitened twice
    kw = {"token_rewards": rewards, "action_mask": mask, "group_ids": group_ids}
    once, _ = compute_advantages("reinforce_plus_plus_baseline", **kw)
    again, _ = compute_advantages("reinforce_plus_plus_baseline", whiten=True, **kw)
    assert_close(once, again, rtol=0, atol=0)
    assert not torch.equal(raw, adv)


# The example: two groups of 4, the second all wrong, with unequal lengths. Token-mean whitening gave the
# all-wrong group +0.305 on every token (wrong answers reinforced).
ZERO_VAR_REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
ZERO_VAR_LENGTHS = [5, 20, 5, 20, 40, 40, 40, 40]
ZERO_VAR_GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


def _length_mask(lengths):
    width = max(lengths)
    return torch.tensor([[1] * n + [0] * (width - n) for n in lengths])


@pytest.mark.parametrize("name", sorted(BASELINE_ESTIMATORS))
def test_zero_variance_group_gets_exactly_zero_with_whiten(name):
    mask = _length_mask(ZERO_VAR_LENGTHS)
    kw = {"token_rewards": ZERO_VAR_REWARDS, "action_mask": mask, "group_ids": ZERO_VAR_GROUPS}
    kw["baseline_rewards"] = torch.tensor([0.5] * 4 + [0.0] * 4)  # remax: greedy got the all-wrong group's reward
    adv, _ = compute_advantages(name, whiten=True, **kw)
    assert adv[4:].abs().max().item() == 0.0, f"{name}: the all-wrong group must get exactly 0"
    raw, _ = compute_advantages(name, whiten=False, **kw)
    valid = mask.bool()
    assert torch.equal(torch.sign(adv[valid]), torch.sign(raw[valid]))  # scaling keeps every sign
    if name not in WHITENED_BY_DEFINITION:  # one positive factor: raw * rsqrt(var(raw) + eps)
        assert_close(adv, raw * torch.rsqrt(raw[valid].var() + 1e-8))


def test_token_mean_whitening_would_reinforce_the_all_wrong_group():
    """What the old rule did (and gae still does, where the critic is the baseline): centre by the token mean."""
    mask = _length_mask(ZERO_VAR_LENGTHS)
    raw, _ = compute_advantages("grpo", token_rewards=ZERO_VAR_REWARDS, action_mask=mask, group_ids=ZERO_VAR_GROUPS)
    shifted = masked_whiten(raw, mask)
    assert abs(shifted[4, 0].item() - 0.305) < 1e-3  # the figure in the bug report


def test_masked_whiten_matches_explicit_formula():
    x = torch.tensor([[1.0, 2.0, 99.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    w = _explicit_whiten([1.0, 2.0, 4.0, 0.0])
    assert_close(masked_whiten(x, mask), torch.tensor([[w[0], w[1], 0.0], [w[2], w[3], 0.0]]))


def test_group_stats_unbiased_std():
    mean, std, count = group_stats(torch.tensor([1.0, 3.0, 10.0]), torch.tensor([4, 4, 0]))
    assert_close(mean, torch.tensor([2.0, 2.0, 10.0]))
    assert_close(std, torch.tensor([math.sqrt(2.0), math.sqrt(2.0), 0.0]))
    assert_close(count, torch.tensor([2.0, 2.0, 1.0]))


def test_advantages_do_not_track_gradients():
    mask, rewards, _, values = _random_batch(seed=7)
    values = values.requires_grad_()
    adv, ret = _run("gae", token_rewards=rewards, action_mask=mask, values=values)
    assert not adv.requires_grad and not ret.requires_grad


# -------------------------------------------------------------------------------------------------------- errors


def test_unknown_estimator_lists_valid_names():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*grpo"):
        get_advantage_estimator("ppo")


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        ("gae", "values"),
        ("grpo", "group_ids"),
        ("dr_grpo", "group_ids"),
        ("rloo", "group_ids"),
        ("reinforce_plus_plus_baseline", "group_ids"),
        ("remax", "baseline_rewards"),
    ],
)
def test_missing_required_input_raises(name, missing):
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match=f"'{name}' needs `{missing}`"):
        _run(name, token_rewards=torch.tensor([1.0, 0.0]), action_mask=mask)


def test_bad_shapes_and_group_ids_raise():
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match="group_ids must be an integer"):
        _run("grpo", token_rewards=torch.tensor([1.0, 0.0]), action_mask=mask, group_ids=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="group_ids must be"):
        _run("grpo", token_rewards=torch.tensor([1.0, 0.0]), action_mask=mask, group_ids=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="token_rewards shape"):
        _run("grpo", token_rewards=torch.ones(2, 4), action_mask=mask, group_ids=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="values shape"):
        _run("gae", token_rewards=torch.ones(2), action_mask=mask, values=torch.ones(2, 4))


def test_discounted_reverse_cumsum_with_per_token_discounts():
    """Per-token discounts (1 at masked holes): the doubling scan equals y_t = x_t + d_t * y_{t+1}."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3001, generator=gen, dtype=torch.float64)
    d = torch.where(torch.rand(4, 3001, generator=gen) < 0.2, 1.0, 0.99 * 0.95).double()
    y = discounted_reverse_cumsum(x, d)
    expected = torch.zeros_like(x)
    running = torch.zeros(4, dtype=torch.float64)
    for t in reversed(range(x.shape[1])):
        running = x[:, t] + d[:, t] * running
        expected[:, t] = running
    _close_to_reference(y, expected, rtol=1e-11)


@pytest.mark.parametrize("seq", [1, 3, 4, 5, 16, 17, 63, 64, 65, 130])
def test_discounted_reverse_cumsum_block_boundaries(seq):
    """Small blocks force several levels of the block recursion and partial last blocks."""
    gen = torch.Generator().manual_seed(seq)
    x = torch.randn(2, seq, generator=gen, dtype=torch.float64)
    expected = torch.zeros_like(x)
    running = torch.zeros(2, dtype=torch.float64)
    for t in reversed(range(seq)):
        running = x[:, t] + 0.9 * running
        expected[:, t] = running
    for block in (2, 4, 64):
        _close_to_reference(discounted_reverse_cumsum(x, 0.9, block=block), expected, rtol=1e-12)

"""Policy losses and the value loss: hand-computed values, metrics, gradients against closed forms (GSPO,
CISPO, REINFORCE, PPO), masking and registry errors."""

import math

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import POLICY_LOSSES, get_policy_loss, gspo_policy_loss, ppo_policy_loss, value_loss

# One row, four tokens: ratios [1, 1.5, 0.5, 4] with advantages [+1, +1, -1, -1].
RATIOS = [1.0, 1.5, 0.5, 4.0]
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
MASK = torch.ones(1, 4)


def _logp():
    return (OLD + torch.log(torch.tensor([RATIOS]))).requires_grad_()


def test_ppo_clip_higher_hand_computed():
    logp = _logp()
    loss, m = ppo_policy_loss(logp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    # per token: max(-A r, -A clip(r, 0.8, 1.28)) = [-1, -1.28 (high clip), 0.8 (low clip), 4]
    assert_close(loss, torch.tensor((-1 - 1.28 + 0.8 + 4) / 4))
    (grad,) = torch.autograd.grad(loss, logp)
    # d/dlogp of -A r is -A r; clipped tokens get 0; token-mean divides by 4
    assert_close(grad, torch.tensor([[-1 / 4, 0.0, 0.0, 4 / 4]]))
    assert_close(m["clipfrac"], torch.tensor(0.5))
    assert_close(m["clipfrac_high"], torch.tensor(0.25))
    assert_close(m["clipfrac_low"], torch.tensor(0.25))
    assert m["dual_clipfrac"].item() == 0.0
    expected_kl = sum(r - 1 - math.log(r) for r in RATIOS) / 4
    assert_close(m["approx_kl"], torch.tensor(expected_kl))
    assert_close(m["ratio_mean"], torch.tensor(sum(RATIOS) / 4))
    assert_close(m["ratio_min"], torch.tensor(0.5))
    assert_close(m["ratio_max"], torch.tensor(4.0))
    assert all(not v.requires_grad for v in m.values())


def test_ppo_dual_clip_hand_computed():
    logp = _logp()
    loss, m = ppo_policy_loss(logp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28, dual_clip_c=3.0)
    # the last token (A = -1, r = 4): min(4, -c A = 3) = 3
    assert_close(loss, torch.tensor((-1 - 1.28 + 0.8 + 3) / 4))
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(grad, torch.tensor([[-1 / 4, 0.0, 0.0, 0.0]]))
    assert_close(m["dual_clipfrac"], torch.tensor(0.25))


def test_ppo_equals_plain_policy_gradient_on_policy():
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=gen)
    adv = torch.randn(3, 5, generator=gen)
    logp = old.clone().requires_grad_()
    loss, m = ppo_policy_loss(logp, old, adv, torch.ones(3, 5))
    assert_close(loss, -adv.mean())  # r = 1 everywhere
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(grad, -adv / 15)
    assert m["clipfrac"].item() == 0.0 and abs(m["approx_kl"].item()) < 1e-7


def test_dual_clip_constant_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip_c must be > 1"):
        ppo_policy_loss(_logp(), OLD, ADV, MASK, dual_clip_c=1.0)


def test_gspo_gradient_matches_sequence_level_objective_and_closed_form():
    old = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -1.5, -2.5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]])  # one advantage per sequence
    delta = torch.tensor([[0.1, 0.0, 7.0], [0.02, 0.01, -0.01]])  # 7.0 sits on a pad
    eps_low, eps_high = 0.02, 0.03
    logp = (old + delta).requires_grad_()
    loss, m = gspo_policy_loss(
        logp, old, adv, mask, clip_low=eps_low, clip_high=eps_high, agg_mode="seq-mean-token-mean"
    )

    # sequence ratios: s_0 = exp((0.1 + 0) / 2) = 1.051 > 1.03 with A > 0 -> clipped; s_1 = exp(0.02 / 3)
    s = [math.exp(0.05), math.exp(0.02 / 3)]
    a = [2.0, -1.0]
    expected_loss = sum(max(-a[i] * s[i], -a[i] * min(max(s[i], 1 - eps_low), 1 + eps_high)) for i in range(2)) / 2
    assert_close(loss, torch.tensor(expected_loss))

    (grad,) = torch.autograd.grad(loss, logp)
    # closed form: sequence 0 is clipped -> 0; sequence 1: -A s / (G |y|) per valid token
    expected = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]) * (-a[1] * s[1] / (2 * 3))
    assert_close(grad, expected)

    # the same gradient from the plain sequence-level objective -(1/G) sum_i min(s_i A_i, clip(s_i) A_i)
    logp2 = (old + delta).requires_grad_()
    seq_terms = []
    for i in range(2):
        n = int(mask[i].sum())
        s_i = torch.exp((logp2[i, :n] - old[i, :n]).mean())
        a_i = adv[i, 0]
        seq_terms.append(-torch.min(s_i * a_i, s_i.clamp(1 - eps_low, 1 + eps_high) * a_i))
    (grad2,) = torch.autograd.grad(torch.stack(seq_terms).mean(), logp2)
    assert_close(grad, grad2)
    assert_close(m["clipfrac"], torch.tensor(2 / 5))
    assert_close(m["seq_ratio_mean"], torch.tensor(sum(s) / 2))


def test_cispo_gradient_closed_form_keeps_clipped_tokens():
    logp = _logp()
    loss, m = get_policy_loss("cispo")(logp, OLD, ADV, MASK, clip_low=0.2, clip_high=0.28)
    weights = [min(max(r, 0.8), 1.28) for r in RATIOS]  # [1, 1.28, 0.8, 1.28]
    adv = ADV[0].tolist()
    lp = logp.detach()[0].tolist()
    assert_close(loss, torch.tensor(sum(-w * a * x for w, a, x in zip(weights, adv, lp, strict=True)) / 4))
    (grad,) = torch.autograd.grad(loss, logp)
    # d/dlogp = -sg(clip(r)) * A / N: every token keeps a gradient, including the clipped ones
    assert_close(grad, torch.tensor([[-w * a / 4 for w, a in zip(weights, adv, strict=True)]]))
    assert_close(m["clipfrac"], torch.tensor(3 / 4))  # r = 1.5, 0.5, 4 are outside [0.8, 1.28]
    assert_close(m["clipfrac_high"], torch.tensor(2 / 4))
    assert_close(m["clipfrac_low"], torch.tensor(1 / 4))


def test_cispo_with_no_lower_bound():
    logp = _logp()
    _, m = get_policy_loss("cispo")(logp, OLD, ADV, MASK, clip_low=1.0, clip_high=2.0)
    assert m["clipfrac_low"].item() == 0.0  # lower bound 0 is never active
    assert_close(m["clipfrac_high"], torch.tensor(0.25))  # r = 4 > 3


def test_reinforce_is_minus_advantage_times_logprob():
    logp = _logp()
    loss, m = get_policy_loss("reinforce")(logp, None, ADV, MASK, agg_mode="seq-mean-token-sum")
    expected = -(ADV * logp.detach()).sum()  # one sequence
    assert_close(loss, expected)
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(grad, -ADV)
    assert m == {}
    _, m2 = get_policy_loss("reinforce")(_logp(), OLD, ADV, MASK)
    assert_close(m2["ratio_max"], torch.tensor(4.0))


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_masked_tokens_never_contribute(name):
    gen = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    old = torch.randn(2, 4, generator=gen) - 2
    adv = torch.randn(2, 4, generator=gen)
    base = old + 0.1 * torch.randn(2, 4, generator=gen)
    pad = ~mask.bool()
    fn = get_policy_loss(name)
    logp = base.clone().requires_grad_()
    loss, metrics = fn(logp, old, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)

    logp_dirty = base.masked_fill(pad, 30.0).requires_grad_()
    loss_dirty, metrics_dirty = fn(logp_dirty, old.masked_fill(pad, -50.0), adv.masked_fill(pad, 1e4), mask)
    (grad_dirty,) = torch.autograd.grad(loss_dirty, logp_dirty)
    assert_close(loss_dirty, loss)
    assert_close(grad_dirty[~pad], grad[~pad])
    assert (grad_dirty[pad] == 0).all()
    for key, value in metrics.items():
        assert_close(metrics_dirty[key], value)


def test_unknown_policy_loss_lists_valid_names():
    with pytest.raises(ValueError, match="unknown policy loss 'vanilla'.*cispo"):
        get_policy_loss("vanilla")


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match="advantages shape"):
        ppo_policy_loss(_logp(), OLD, torch.ones(1, 3), MASK)


# ---------------------------------------------------------------------------------------------------- value loss


def test_value_loss_hand_computed():
    values = torch.tensor([[1.0, 2.1]], requires_grad=True)
    old_values = torch.tensor([[0.5, 2.0]])
    returns = torch.tensor([[2.0, 0.0]])
    loss, m = value_loss(values, old_values, returns, torch.ones(1, 2), clip_eps=0.2)
    # token 0: (1 - 2)^2 = 1 vs clipped V = 0.7: (0.7 - 2)^2 = 1.69 -> 0.5 * 1.69 (clipped term active)
    # token 1: V - V_old = 0.1 is inside the clip range: 0.5 * 2.1^2
    assert_close(loss, torch.tensor((0.5 * 1.69 + 0.5 * 2.1**2) / 2))
    (grad,) = torch.autograd.grad(loss, values)
    assert_close(grad, torch.tensor([[0.0, 2.1 / 2]]))  # clipped token has no gradient
    assert_close(m["vf_clipfrac"], torch.tensor(0.5))
    assert_close(m["vf_mean"], torch.tensor(1.55))
    assert_close(m["vf_error"], torch.tensor((1.0 + 2.1**2) / 2))


def test_value_loss_without_clipping_and_masking():
    values = torch.tensor([[1.0, 5.0]], requires_grad=True)
    loss, m = value_loss(values, torch.zeros(1, 2), torch.tensor([[3.0, 0.0]]), torch.tensor([[1, 0]]), clip_eps=None)
    assert_close(loss, torch.tensor(0.5 * 4.0))
    (grad,) = torch.autograd.grad(loss, values)
    assert_close(grad, torch.tensor([[-2.0, 0.0]]))
    assert m["vf_clipfrac"].item() == 0.0


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES))
def test_token_weights_scale_each_token_of_the_loss_and_its_gradient(name):
    """Rollout correction: the loss with weights w equals the token-wise weighted loss; w = 1 changes nothing,
    w = 0 removes a token's gradient but keeps it in the token count (token-mean divides by 4 either way)."""
    fn = get_policy_loss(name)
    weights = torch.tensor([[1.0, 0.5, 0.0, 2.0]])
    logp = _logp()
    plain, _ = fn(logp, OLD, ADV, MASK)
    same, _ = fn(logp, OLD, ADV, MASK, token_weights=torch.ones(1, 4))
    assert_close(same, plain)
    # The loss is linear in the weights: L(w) = sum_t w_t L(e_t), e_t = one-hot weight on token t.
    per_token = [fn(logp, OLD, ADV, MASK, token_weights=torch.eye(4)[t][None])[0] for t in range(4)]
    assert_close(sum(per_token), plain)
    weighted, _ = fn(logp, OLD, ADV, MASK, token_weights=weights)
    assert_close(weighted, sum(w * loss for w, loss in zip(weights[0].tolist(), per_token, strict=True)))
    (grad,) = torch.autograd.grad(weighted, logp)
    assert grad[0, 2] == 0.0  # weight 0: no gradient


def test_token_weights_must_match_the_loss_shape():
    with pytest.raises(ValueError, match=r"token_weights \(1, 3\) != loss \(1, 4\)"):
        ppo_policy_loss(_logp(), OLD, ADV, MASK, token_weights=torch.ones(1, 3))

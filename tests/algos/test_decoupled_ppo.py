"""Decoupled PPO for asynchronous samples (AReaL, arXiv:2505.24298; Hilton et al. 2021): the loss our update gives
when the tokens of one batch were sampled by several policy versions.

Three policies per token a_t (docs/algorithms.md, "Decoupled PPO for asynchronous samples"):

    pi_behav(a_t)  the engine's log-prob, of the version that sampled that token    (``rollout_logprobs``)
    pi_prox(a_t)   the trainer's log-prob recomputed before the update              (``old_logprobs``)
    pi_theta(a_t)  the policy being updated                                          (``logprobs``, with grad)

    w_t    = min(pi_prox / pi_behav, C)                        rollout_correction(mode="token_tis", cap=C), constant
    r_t    = pi_theta / pi_prox
    loss_t = -w_t * min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)      ppo_policy_loss(..., token_weights=w)

The test drives the repo's two functions exactly as the policy worker does (``ppo_workers._rollout_correction`` then
the policy loss with ``token_weights``) and checks every number against values written out by hand below.
"""

import math

import torch
from torch.testing import assert_close

from reasonrl.algos import ppo_policy_loss, rollout_correction

CAP = 2.0  # rollout_correction_cap C
EPS = 0.2  # clip_low = clip_high

# Two samples of 4 response tokens; row 1's last token is padding (garbage values on purpose).
# Row 0 was started under version v-2 and its last two tokens were sampled after a weight sync (version v-1): the
# old-version tokens are far from the trainer's proximal policy (rho = 3, 2.5: truncated at C = 2), the newer
# ones below it (rho = 0.5, 0.8). Row 1 mixes the same way: rho = 4 (old version), 1 (the proximal version
# itself), 0.25 (newer).
PROX = [[-1.0, -0.5, -2.0, -1.5], [-0.3, -1.2, -0.7, 0.0]]  # log pi_prox, the trainer's recomputed log-probs
RHO = [[3.0, 2.5, 0.5, 0.8], [4.0, 1.0, 0.25, 1.0]]  # pi_prox / pi_behav, chosen
RATIO = [[1.1, 1.5, 0.7, 0.9], [0.7, 1.3, 1.0, 1.0]]  # r = pi_theta / pi_prox, chosen
ADV = [[1.0, 1.0, 1.0, 1.0], [-2.0, -2.0, -2.0, 0.0]]  # one advantage per sample (GRPO-like)
MASK = [[1, 1, 1, 1], [1, 1, 1, 0]]

# Hand-computed (python math, not the code under test):
#   w = min(rho, 2):            row 0 [2, 2, 0.5, 0.8]          row 1 [2, 1, 0.25, pad 0]
#   PPO term min(rA, clip(r)A), eps = 0.2, clip range [0.8, 1.2]:
#     row 0, A = +1: r = 1.1 -> 1.1; r = 1.5 -> min(1.5, 1.2) = 1.2 (clipped); r = 0.7 -> min(0.7, 0.8) = 0.7;
#                    r = 0.9 -> 0.9
#     row 1, A = -2: r = 0.7 -> min(-1.4, -1.6) = -1.6 (clipped); r = 1.3 -> min(-2.6, -2.4) = -2.6;
#                    r = 1.0 -> -2.0
#   loss_t = -w * term: row 0 [-2.2, -2.4, -0.35, -0.72]    row 1 [3.2, 2.6, 0.5]
#   token-mean over 7 valid tokens: (-2.2 - 2.4 - 0.35 - 0.72 + 3.2 + 2.6 + 0.5) / 7 = 0.63 / 7 = 0.09
#   d loss_t / d log pi_theta = -w A r on an unclipped token (d r / d log pi_theta = r), 0 on a clipped one:
#     row 0: [-2 * 1.1, 0, -0.5 * 0.7, -0.8 * 0.9] = [-2.2, 0, -0.35, -0.72]
#     row 1: [0, -1 * (-2) * 1.3, -0.25 * (-2) * 1.0, pad 0] = [0, 2.6, 0.5, 0]    (divided by 7 for token-mean)
EXPECTED_WEIGHTS = [[2.0, 2.0, 0.5, 0.8], [2.0, 1.0, 0.25, 0.0]]
EXPECTED_TOKEN_LOSS = [[-2.2, -2.4, -0.35, -0.72], [3.2, 2.6, 0.5, 0.0]]
EXPECTED_LOSS = 0.09
EXPECTED_GRAD = [[-2.2 / 7, 0.0, -0.35 / 7, -0.72 / 7], [0.0, 2.6 / 7, 0.5 / 7, 0.0]]


def _inputs():
    """(logprobs with grad, old_logprobs, rollout_logprobs, advantages, mask), all [2, 4] float32."""
    prox = torch.tensor(PROX)
    behav = prox - torch.tensor(RHO).log()  # log pi_behav = log pi_prox - log rho
    behav[1, 3] = -9.0  # padding: any value
    logp = (prox + torch.tensor(RATIO).log()).requires_grad_()  # log pi_theta = log pi_prox + log r
    return logp, prox, behav, torch.tensor(ADV), torch.tensor(MASK)


def _decoupled_loss(logp, prox, behav, adv, mask, **loss_kwargs):
    """The update's path (``ppo_workers._rollout_correction`` + the policy loss): weights, then weighted PPO."""
    weights, _, _ = rollout_correction(prox.detach(), behav, mask, "token_tis", CAP)
    loss, _ = ppo_policy_loss(logp, prox, adv, mask, clip_low=EPS, clip_high=EPS, token_weights=weights, **loss_kwargs)
    return loss, weights


def test_weights_truncate_old_version_tokens_and_keep_newer_ones():
    _, prox, behav, _, mask = _inputs()
    weights, keep, metrics = rollout_correction(prox, behav, mask, "token_tis", CAP)
    assert_close(weights, torch.tensor(EXPECTED_WEIGHTS))
    assert torch.equal(keep, mask.bool())
    # 3 of the 7 valid tokens (rho = 3, 2.5, 4) reach the cap
    assert math.isclose(metrics["rollout_corr/truncated_token_frac"], 3 / 7, rel_tol=1e-6)


def test_every_per_token_loss_equals_the_hand_formula():
    logp, prox, behav, adv, mask = _inputs()
    weights, _, _ = rollout_correction(prox, behav, mask, "token_tis", CAP)
    for i, j in mask.nonzero().tolist():
        only = torch.zeros_like(mask)
        only[i, j] = 1  # one token: token-mean with a global count of 1 is that token's loss
        loss, _ = ppo_policy_loss(logp, prox, adv, only, clip_low=EPS, clip_high=EPS, token_weights=weights)
        assert_close(loss, torch.tensor(EXPECTED_TOKEN_LOSS[i][j]), msg=f"token ({i}, {j})")


def test_batch_loss_and_gradient_equal_the_hand_formula():
    logp, prox, behav, adv, mask = _inputs()
    loss, _ = _decoupled_loss(logp, prox, behav, adv, mask)
    assert_close(loss, torch.tensor(EXPECTED_LOSS))
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(grad, torch.tensor(EXPECTED_GRAD))


def test_weights_are_constants_no_gradient_through_them():
    logp, prox, behav, adv, mask = _inputs()
    prox = prox.clone().requires_grad_()
    behav = behav.clone().requires_grad_()
    weights, _, _ = rollout_correction(prox, behav, mask, "token_tis", CAP)
    assert not weights.requires_grad
    loss, _ = ppo_policy_loss(logp, prox, adv, mask, clip_low=EPS, clip_high=EPS, token_weights=weights)
    loss.backward()
    assert prox.grad is None and behav.grad is None  # neither the proximal nor the behaviour log-probs get one
    assert_close(logp.grad, torch.tensor(EXPECTED_GRAD))


def test_proximal_taken_from_the_current_forward_keeps_the_weights_constant():
    """One optimizer step per rollout (``reuse_current_logprobs``): pi_prox is the update's own forward. Even when
    the weights are computed from the tensor that carries the gradient, they stay constants: with r = 1 the
    gradient is -w A per token, w = min(pi_theta / pi_behav, C) evaluated, never differentiated."""
    _, prox, behav, adv, mask = _inputs()
    logp = prox.clone().requires_grad_()  # r = 1 on every token
    weights, _, _ = rollout_correction(logp, behav, mask, "token_tis", CAP)
    loss, _ = ppo_policy_loss(logp, logp.detach(), adv, mask, clip_low=EPS, clip_high=EPS, token_weights=weights)
    (grad,) = torch.autograd.grad(loss, logp)
    # -w A / 7: row 0 (A = 1) [-2, -2, -0.5, -0.8] / 7; row 1 (A = -2) [4, 2, 0.5, 0] / 7
    assert_close(grad, torch.tensor([[-2.0, -2.0, -0.5, -0.8], [4.0, 2.0, 0.5, 0.0]]) / 7)


def test_behaviour_equal_to_proximal_is_plain_ppo_exactly():
    """Synchronous PPO: the engine sampled with the trainer's weights, pi_behav = pi_prox, every w_t = 1."""
    logp, prox, _, adv, mask = _inputs()
    loss, weights = _decoupled_loss(logp, prox, prox.clone(), adv, mask)
    assert torch.equal(weights, mask.float())  # exactly 1 on valid tokens, exactly 0 on padding
    plain, _ = ppo_policy_loss(logp, prox, adv, mask, clip_low=EPS, clip_high=EPS)
    assert torch.equal(loss, plain)
    grad, plain_grad = (torch.autograd.grad(x, logp)[0] for x in (loss, plain))
    assert torch.equal(grad, plain_grad)
    # and the plain PPO value by hand: the PPO terms of the example with w = 1
    # -(1.1 + 1.2 + 0.7 + 0.9 - 1.6 - 2.6 - 2.0) / 7 = 2.3 / 7
    assert_close(plain, torch.tensor(2.3 / 7))


def test_mixed_versions_differ_from_plain_ppo_by_the_weights_only():
    """The decoupled loss is the plain PPO loss with each token's term scaled by its own w_t: tokens of one sample
    that different versions sampled get different weights, and the ratio (hence the clip) still uses pi_prox."""
    logp, prox, behav, adv, mask = _inputs()
    loss, _ = _decoupled_loss(logp, prox, behav, adv, mask)
    (grad,) = torch.autograd.grad(loss, logp)
    plain, _ = ppo_policy_loss(logp, prox, adv, mask, clip_low=EPS, clip_high=EPS)
    (plain_grad,) = torch.autograd.grad(plain, logp)
    assert_close(grad, plain_grad * torch.tensor(EXPECTED_WEIGHTS))
    # clipped tokens are the same ones as in plain PPO ((0, 1) and (1, 0)): the clip is around pi_prox, not pi_behav
    assert torch.equal(grad == 0, plain_grad == 0)

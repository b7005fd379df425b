"""KL estimators (known values, exact expectations, clamping, straight-through gradient), KL in rewards, KL loss
and the KL controllers."""

import math

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    get_kl_controller,
    kl_estimator_names,
    kl_loss,
    kl_penalty,
    kl_shaped_token_rewards,
)

LOGP = torch.tensor([[math.log(0.5)]])
REF = torch.tensor([[math.log(0.25)]])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k1", math.log(2)),  # log 0.5 - log 0.25
        ("kl", math.log(2)),
        ("k2", 0.5 * math.log(2) ** 2),
        ("mse", 0.5 * math.log(2) ** 2),
        ("k3", 0.5 - 1 + math.log(2)),  # x = log(0.25 / 0.5): e^x - x - 1 = 0.5 + log 2 - 1
        ("low_var_kl", 0.5 - 1 + math.log(2)),
        ("abs", math.log(2)),
    ],
)
def test_known_values(name, expected):
    assert_close(kl_penalty(LOGP, REF, name), torch.tensor([[expected]]))


def test_abs_of_negative_difference():
    assert_close(kl_penalty(REF, LOGP, "abs"), torch.tensor([[math.log(2)]]))
    assert_close(kl_penalty(REF, LOGP, "k1"), torch.tensor([[-math.log(2)]]))


def test_k1_and_k3_are_unbiased_exactly_in_expectation():
    # pi = p, ref = q over 3 tokens; E_{a ~ p}[k(a)] computed exactly by enumeration
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    true_kl = sum(p[i].item() * math.log(p[i].item() / q[i].item()) for i in range(3))
    for name in ("k1", "k3"):
        values = kl_penalty(p.log()[None], q.log()[None], name)[0]
        assert abs((p * values).sum().item() - true_kl) < 1e-12
    k2_expectation = (p * kl_penalty(p.log()[None], q.log()[None], "k2")[0]).sum().item()
    assert k2_expectation > 0 and abs(k2_expectation - true_kl) > 1e-3  # k2 is biased


def test_k2_and_k3_are_non_negative():
    d = torch.linspace(-5, 5, 101)[None]
    assert (kl_penalty(d, torch.zeros_like(d), "k3") >= 0).all()
    assert (kl_penalty(d, torch.zeros_like(d), "k2") >= 0).all()


def test_k3_is_clamped_like_verl():
    logp = torch.tensor([[-30.0, -12.0]])
    ref = torch.zeros_like(logp)
    out = kl_penalty(logp, ref, "k3")
    assert out[0, 0].item() == 10.0  # x clamped to 20 then the value clamped to 10
    assert out[0, 1].item() == 10.0  # e^12 - 13 > 10 -> 10


@pytest.mark.parametrize("base", ["k1", "k3", "abs", "low_var_kl"])
def test_straight_through_value_of_base_gradient_of_k2(base):
    logp = torch.tensor([[-0.3, -1.2, -2.0]], requires_grad=True)
    ref = torch.tensor([[-0.5, -0.4, -2.5]])
    value = kl_penalty(logp, ref, base + "+")
    assert_close(value, kl_penalty(logp.detach(), ref, base))
    (grad,) = torch.autograd.grad(value.sum(), logp)
    assert_close(grad, (logp - ref).detach())  # d/dlogp 0.5 (logp - ref)^2


def test_plain_k3_gradient_differs_from_straight_through():
    logp = torch.tensor([[-0.3]], requires_grad=True)
    ref = torch.tensor([[-0.5]])
    (grad,) = torch.autograd.grad(kl_penalty(logp, ref, "k3").sum(), logp)
    assert_close(grad, torch.tensor([[1 - math.exp(-0.2)]]))  # d/dlogp (e^x - x - 1), x = ref - logp


def test_mask_zeroes_padding_and_unknown_name_raises():
    out = kl_penalty(torch.zeros(1, 2), torch.ones(1, 2), "k1", action_mask=torch.tensor([[1, 0]]))
    assert_close(out, torch.tensor([[-1.0, 0.0]]))
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'.*k3\\+"):
        kl_penalty(LOGP, REF, "k4")
    assert {"k1", "k2", "k3", "abs"} <= set(KL_ESTIMATORS)
    assert "k3+" in kl_estimator_names()


def test_kl_shaped_token_rewards_hand_computed():
    outcome = torch.tensor([1.0, 0.0])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.0]])
    out = kl_shaped_token_rewards(outcome, mask, kl, kl_coef=0.5)
    assert_close(out, torch.tensor([[-0.05, -0.1, 1.0 - 0.15], [-0.2, -0.25, 0.0]]))


def test_kl_loss_aggregates_over_valid_tokens():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0, 0.0]])
    loss, m = kl_loss(logp, ref, torch.tensor([[1, 1, 0]]), estimator="k1")
    assert_close(loss, torch.tensor(0.25))  # (0.5 + 0) / 2
    assert_close(m["kl"], torch.tensor(0.25))
    (grad,) = torch.autograd.grad(loss, logp)
    assert_close(grad, torch.tensor([[0.5, 0.5, 0.0]]))


def test_fixed_controller_never_changes():
    ctl = FixedKLController(0.05)
    ctl.update(current_kl=10.0, n_steps=256)
    assert ctl.value == 0.05


def test_adaptive_controller_hand_computed():
    ctl = AdaptiveKLController(init_kl_coef=0.1, target_kl=1.0, horizon=100)
    ctl.update(current_kl=1.5, n_steps=10)  # error clipped to +0.2 -> x (1 + 0.2 * 10 / 100)
    assert math.isclose(ctl.value, 0.1 * 1.02)
    ctl.update(current_kl=0.9, n_steps=10)  # error -0.1 -> x (1 - 0.01)
    assert math.isclose(ctl.value, 0.1 * 1.02 * 0.99)
    ctl.update(current_kl=0.0, n_steps=100)  # error clipped to -0.2 -> x 0.8
    assert math.isclose(ctl.value, 0.1 * 1.02 * 0.99 * 0.8)


def test_get_kl_controller():
    assert isinstance(get_kl_controller("fixed", 0.01), FixedKLController)
    ctl = get_kl_controller("adaptive", 0.01, target_kl=0.1, horizon=10000)
    assert isinstance(ctl, AdaptiveKLController) and ctl.value == 0.01
    with pytest.raises(ValueError, match="needs target_kl and horizon"):
        get_kl_controller("adaptive", 0.01)
    with pytest.raises(ValueError, match="unknown KL controller"):
        get_kl_controller("pid", 0.01)

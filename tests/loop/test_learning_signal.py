"""Advantages as the trainer computes them from a config, under every recipe's resolved config, and the warning
when a step carries no learning signal."""

from __future__ import annotations

import pytest
import torch
from loguru import logger

from playground import recipe_config, rl_recipe_names
from reasonrl.config import BasePPOExpConfig
from reasonrl.loop.learning_signal import NoSignalMonitor, no_signal_reason, step_advantages

# Two prompt groups of 4; the second is all wrong. Unequal lengths: token-mean whitening moved the all-wrong group
# to +0.305 per token.
REWARDS = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
LENGTHS = [5, 20, 5, 20, 40, 40, 40, 40]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def _mask(lengths):
    width = max(lengths)
    return torch.tensor([[1] * n + [0] * (width - n) for n in lengths]).bool()


def _resolved(name: str, debug: bool) -> BasePPOExpConfig:
    cfg = recipe_config(name)()
    return cfg.apply_debug_mode() if debug else cfg


@pytest.mark.parametrize("debug", [False, True], ids=["recipe", "DEBUG_MODE"])
@pytest.mark.parametrize("name", rl_recipe_names())
def test_zero_variance_group_gets_exactly_zero_under_every_recipe(name, debug):
    cfg = _resolved(name, debug)
    mask = _mask(LENGTHS)
    # a distillation recipe (teacher_pretrain): a teacher that agrees with the policy (equal log-probs, so the
    # per-token distillation reward is 0) leaves the outcome part, which is what this test is about
    agreeing = {"old_logprobs": torch.zeros(mask.shape), "teacher_logprobs": torch.zeros(mask.shape)}
    out = step_advantages(
        cfg,
        rewards=REWARDS,
        action_mask=mask,
        values=torch.zeros(mask.shape),  # gae: a critic that predicts 0 everywhere
        group_ids=GROUPS,
        baseline_rewards=torch.tensor([0.5] * 4 + [0.0] * 4),  # remax: the greedy answer was wrong too
        **(agreeing if cfg.teacher_pretrain else {}),
    )
    if cfg.teacher_pretrain and not cfg.distill_outcome_reward:
        # distillation alone: the outcome reward is not trained on, and the agreeing teacher adds 0 everywhere
        assert out.advantages.abs().max().item() == 0.0, f"{name}: only the teacher's term may move the policy"
        return
    if cfg.advantage_estimator == "gae":
        # The critic is gae's baseline (A = R - V before whitening): equal rewards in a group do not make A = 0.
        # ORZ whitens gae; the rule is documented in docs/algorithms.md.
        assert cfg.whiten_advantages and out.advantages[mask].mean().abs() < 1e-5
        return
    assert out.advantages[4:].abs().max().item() == 0.0, f"{name}: the all-wrong group must get exactly 0"
    assert (out.advantages[[0, 2]][mask[[0, 2]]] > 0).all() and (out.advantages[[1, 3]][mask[[1, 3]]] < 0).all()


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline", "remax"])
def test_zero_variance_group_is_zero_with_the_base_default_whitening(estimator):
    """A user who only sets the estimator keeps the base default whiten_advantages=True (ORZ's): still 0."""
    cfg = BasePPOExpConfig(advantage_estimator=estimator)
    assert cfg.whiten_advantages
    mask = _mask(LENGTHS)
    out = step_advantages(
        cfg, rewards=REWARDS, action_mask=mask, group_ids=GROUPS, baseline_rewards=torch.tensor([0.5] * 4 + [0.0] * 4)
    )
    assert out.advantages[4:].abs().max().item() == 0.0


def test_kl_in_reward_moves_tokens_but_not_the_outcome_sign():
    cfg = BasePPOExpConfig(advantage_estimator="grpo", kl_mode="reward", init_kl_coef=0.1, whiten_advantages=True)
    mask = _mask(LENGTHS)
    old = torch.zeros(mask.shape)
    ref = torch.full(mask.shape, -0.5)
    plain = step_advantages(cfg, rewards=REWARDS, action_mask=mask, group_ids=GROUPS, kl_coef=0.0)
    shaped = step_advantages(
        cfg, rewards=REWARDS, action_mask=mask, group_ids=GROUPS, old_logprobs=old, ref_logprobs=ref, kl_coef=0.1
    )
    assert shaped.kl is not None and shaped.kl > 0 and "policy/kl" in shaped.metrics
    assert not torch.equal(plain.advantages, shaped.advantages)


def test_metrics_include_the_nonzero_fraction():
    cfg = BasePPOExpConfig(advantage_estimator="grpo")
    mask = _mask(LENGTHS)
    out = step_advantages(cfg, rewards=REWARDS, action_mask=mask, group_ids=GROUPS)
    assert out.metrics["adv/nonzero_frac"] == pytest.approx(mask[:4].sum().item() / mask.sum().item())


@pytest.fixture
def warnings():
    lines: list[str] = []
    sink = logger.add(lambda msg: lines.append(str(msg)), level="WARNING")
    yield lines
    logger.remove(sink)


def test_no_signal_warns_once_then_every_n_steps(warnings):
    cfg = BasePPOExpConfig(advantage_estimator="grpo")
    mask = _mask(LENGTHS)
    zero_rewards = torch.zeros(8)
    out = step_advantages(cfg, rewards=zero_rewards, action_mask=mask, group_ids=GROUPS)
    monitor = NoSignalMonitor(every=3)
    flags = [
        monitor.check(step, out.advantages, mask, lambda: no_signal_reason(cfg, zero_rewards, GROUPS))
        for step in range(1, 8)
    ]
    assert flags == [True] * 7
    assert len(warnings) == 3  # steps 1, 3 and 6 (the 1st, 3rd and 6th zero-signal step)
    assert "same reward (0)" in warnings[0] and "never earns the reward" in warnings[0]
    live = step_advantages(cfg, rewards=REWARDS, action_mask=mask, group_ids=GROUPS)
    assert monitor.check(8, live.advantages, mask, lambda: "unused") is False
    assert len(warnings) == 3


def test_no_signal_reason_names_zero_variance_groups():
    cfg = BasePPOExpConfig(advantage_estimator="rloo")
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    reason = no_signal_reason(cfg, rewards, [0, 0, 1, 1])
    assert "zero variance" in reason and "dynamic_sampling" in reason
    assert "same reward (1)" in no_signal_reason(cfg, torch.ones(4), [0, 0, 1, 1])

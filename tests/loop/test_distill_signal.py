"""On-policy distillation's learning signal (``step_advantages`` with a teacher): the per-token reward
r^D = -distill_coef * (logp_old - logp_teacher), added after GRPO's group normalisation and fed to GAE as a token
reward. Every expected value is computed here from the documented formula, by hand, in plain Python loops."""

from __future__ import annotations

import math

import pytest
import torch

from reasonrl.config import BasePPOExpConfig
from reasonrl.loop.learning_signal import step_advantages

# two prompt groups of 3, responses of 2-4 tokens (padding after)
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]
GROUPS = [0, 0, 0, 1, 1, 1]
LENGTHS = [2, 4, 3, 4, 1, 2]
T = max(LENGTHS)


def _mask() -> torch.Tensor:
    return torch.tensor([[t < n for t in range(T)] for n in LENGTHS])


def _logprobs(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return -torch.rand(len(LENGTHS), T, generator=g) * 3  # [batch, T], log-probs in (-3, 0]


def _cfg(**kw) -> BasePPOExpConfig:
    return BasePPOExpConfig(teacher_pretrain="tiny", **kw)


def _run(cfg, old, teacher, **kw):
    return step_advantages(
        cfg,
        rewards=torch.tensor(REWARDS),
        action_mask=_mask(),
        old_logprobs=old,
        teacher_logprobs=teacher,
        group_ids=GROUPS,
        **kw,
    )


def _group_norm(eps: float) -> list[float]:
    """GRPO's (s_i - mean_g) / (std_g + eps) with the unbiased group std."""
    out = []
    for i, g in enumerate(GROUPS):
        members = [REWARDS[j] for j in range(len(GROUPS)) if GROUPS[j] == g]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((r - mean) ** 2 for r in members) / (len(members) - 1))
        out.append((REWARDS[i] - mean) / (std + eps))
    return out


@pytest.mark.parametrize("coef", [1.0, 0.25])
def test_grpo_adds_the_per_token_reverse_kl_after_the_group_normalisation(coef):
    cfg = _cfg(advantage_estimator="grpo", whiten_advantages=False, distill_coef=coef)
    old, teacher = _logprobs(0), _logprobs(1)
    out = _run(cfg, old, teacher)
    norm = _group_norm(cfg.grpo_eps)
    for i, n in enumerate(LENGTHS):
        for t in range(T):
            want = norm[i] + coef * (teacher[i, t].item() - old[i, t].item()) if t < n else 0.0
            assert out.advantages[i, t].item() == pytest.approx(want, abs=1e-6), (i, t)
    assert torch.equal(out.returns, out.advantages)


def test_grpo_whitening_scales_the_outcome_part_only():
    cfg = _cfg(advantage_estimator="grpo", whiten_advantages=True)
    old, teacher = _logprobs(2), _logprobs(3)
    with_teacher = _run(cfg, old, teacher)
    same = _run(cfg, old, old.clone())  # teacher == student: r^D = 0, the plain GRPO advantages
    mask = _mask()
    distill = torch.where(mask, teacher - old, torch.zeros_like(old))  # coef 1
    assert torch.allclose(with_teacher.advantages - distill, same.advantages, atol=1e-6)
    assert same.metrics["distill/reverse_kl"] == 0.0 and same.metrics["distill/reward_mean"] == 0.0


def test_distillation_alone_gives_exactly_the_teacher_term():
    cfg = _cfg(advantage_estimator="grpo", distill_outcome_reward=False, distill_coef=0.5)
    old, teacher = _logprobs(4), _logprobs(5)
    out = _run(cfg, old, teacher)
    for i, n in enumerate(LENGTHS):
        for t in range(T):
            want = -0.5 * (old[i, t].item() - teacher[i, t].item()) if t < n else 0.0
            assert out.advantages[i, t].item() == pytest.approx(want, abs=1e-6)


def test_gae_takes_the_distillation_reward_as_token_rewards():
    """A_t = sum_{k >= t} (gamma lam)^(k - t) delta_k, delta_k = r_k + gamma V_{k+1} - V_k, r_k = R at the last token
    + r^D_k; here V = 0.5 everywhere, gamma = 0.9, lam = 0.8, no whitening."""
    gamma, lam = 0.9, 0.8
    cfg = _cfg(advantage_estimator="gae", whiten_advantages=False, gamma=gamma, lam=lam, distill_coef=2.0)
    old, teacher = _logprobs(6), _logprobs(7)
    values = torch.full((len(LENGTHS), T), 0.5)
    out = _run(cfg, old, teacher, values=values)
    for i, n in enumerate(LENGTHS):
        r = [-2.0 * (old[i, t].item() - teacher[i, t].item()) + (REWARDS[i] if t == n - 1 else 0.0) for t in range(n)]
        v = [0.5] * n + [0.0]
        running, want = 0.0, [0.0] * n
        for t in reversed(range(n)):
            running = r[t] + gamma * v[t + 1] - v[t] + gamma * lam * running
            want[t] = running
        for t in range(T):
            assert out.advantages[i, t].item() == pytest.approx(want[t] if t < n else 0.0, abs=1e-5), (i, t)
            assert out.returns[i, t].item() == pytest.approx(want[t] + 0.5 if t < n else 0.0, abs=1e-5)


def test_metrics_are_the_token_mean_reverse_kl_and_the_summed_reward_per_sample():
    cfg = _cfg(advantage_estimator="grpo", distill_coef=3.0)
    old, teacher = _logprobs(8), _logprobs(9)
    out = _run(cfg, old, teacher)
    d = [[old[i, t].item() - teacher[i, t].item() for t in range(n)] for i, n in enumerate(LENGTHS)]
    tokens = sum(LENGTHS)
    assert out.metrics["distill/reverse_kl"] == pytest.approx(sum(map(sum, d)) / tokens, abs=1e-6)
    assert out.metrics["distill/reward_mean"] == pytest.approx(sum(-3.0 * sum(x) for x in d) / len(d), abs=1e-5)


def test_a_hole_in_the_loss_mask_gets_no_distillation_reward():
    cfg = _cfg(advantage_estimator="grpo", distill_outcome_reward=False)
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[0, 1:3] = False  # tool output inside the response
    old, teacher = torch.zeros(2, 4), torch.full((2, 4), -1.0)
    out = step_advantages(
        cfg,
        rewards=torch.tensor([1.0, 0.0]),
        action_mask=mask,
        old_logprobs=old,
        teacher_logprobs=teacher,
        group_ids=[0, 0],
    )
    assert out.advantages[0].tolist() == [-1.0, 0.0, 0.0, -1.0] and out.advantages[1].tolist() == [-1.0] * 4
    assert out.metrics["distill/reverse_kl"] == pytest.approx(1.0)


def test_a_step_without_teacher_log_probs_is_refused():
    cfg = _cfg(advantage_estimator="grpo")
    with pytest.raises(ValueError, match="teacher_logprobs=None"):
        _run(cfg, _logprobs(0), None)
    with pytest.raises(ValueError, match="old_logprobs=None"):
        _run(cfg, None, _logprobs(0))


def test_a_teacher_needs_the_old_log_prob_forward():
    """With one optimizer step per rollout the update would reuse its own log-probs; distillation needs them before
    the update, as kl_mode=reward does."""
    assert BasePPOExpConfig(advantage_estimator="grpo").reuses_current_logprobs
    assert not _cfg(advantage_estimator="grpo").reuses_current_logprobs

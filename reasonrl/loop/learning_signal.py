"""From one step's rewards to its advantages, and a check that the step carries any learning signal at all.

    token rewards  r_{i,t} = R_i at the last response token of sample i (0 elsewhere; with a teacher and
                             distill_outcome_reward=false, R_i is not used: 0)
                             - kl_coef * KL_t(pi_old || pi_ref)          (only with kl_mode='reward')
                             + r^D_{i,t}                                 (teacher_pretrain, estimators whose route
                                                                          is "token_rewards": gae, reinforce_plus_plus,
                                                                          remax)
    advantages     A = estimator(r, mask, values, group ids, greedy baselines), then the batch normalisation
                   rule of ``reasonrl.algos.compute_advantages`` (gae: whitened; estimators with a per-sample
                   baseline: scaled only, so a prompt group whose samples all got the same reward keeps A = 0)
                   + r^D_{i,t}                                           (teacher_pretrain, sequence-score
                                                                          estimators: grpo, dr_grpo, rloo,
                                                                          reinforce_plus_plus_baseline)

    where r^D_{i,t} = -distill_coef * (log pi_old - log pi_teacher)_{i,t} on the loss tokens
    (:func:`reasonrl.algos.distill_token_rewards`; where it enters: :func:`reasonrl.algos.distill_advantage_route`).

:func:`step_advantages` is the one place the trainer turns a config into advantages; tests call it with every
recipe's resolved config. :class:`NoSignalMonitor` warns when a step's advantages are all zero (the policy gets a
zero gradient from the advantage term) and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from loguru import logger

from reasonrl import algos
from reasonrl.config.names import GROUP_ESTIMATORS


@dataclass
class StepAdvantages:
    advantages: torch.Tensor  # [batch, T], 0 on padding
    returns: torch.Tensor  # [batch, T] critic targets (gae) / equal to the advantages (outcome estimators)
    kl: float | None  # token-mean KL(pi_old || pi_ref) of the batch, when a reference model ran
    metrics: dict[str, float]


def step_advantages(
    cfg,
    *,
    rewards: torch.Tensor,
    action_mask: torch.Tensor,
    old_logprobs: torch.Tensor | None = None,
    ref_logprobs: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    group_ids: Sequence[int] | torch.Tensor | None = None,
    baseline_rewards: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    teacher_logprobs: torch.Tensor | None = None,
) -> StepAdvantages:
    """Advantages of one rollout batch exactly as the trainer computes them for ``cfg``.

    Args:
        rewards: [batch] final reward per sample (rule reward + reward-model score + shaping).
        action_mask: [batch, T] True on response tokens.
        old_logprobs, ref_logprobs: [batch, T] rollout-policy and reference log-probs (KL), or None.
        values: [batch, T] critic values (gae), or None.
        group_ids: [batch] prompt-group id per sample (group estimators).
        baseline_rewards: [batch] reward of the greedy response to the sample's prompt (remax).
        kl_coef: current KL coefficient (used with ``kl_mode='reward'``).
        teacher_logprobs: [batch, T] the teacher's log-probs of the sampled tokens (``teacher_pretrain``), or None.
    """
    mask = action_mask.bool()
    distilling = cfg.teacher_pretrain is not None
    if distilling and (teacher_logprobs is None or old_logprobs is None):
        raise ValueError(
            "teacher_pretrain is set, so the step needs the teacher's and the rollout policy's log-probs of the "
            f"sampled tokens; got teacher_logprobs={'None' if teacher_logprobs is None else 'a tensor'}, "
            f"old_logprobs={'None' if old_logprobs is None else 'a tensor'}"
        )
    outcome = rewards.float() if not distilling or cfg.distill_outcome_reward else torch.zeros_like(rewards.float())
    token_rewards = algos.outcome_to_token_rewards(outcome, mask)  # [batch, T]
    metrics: dict[str, float] = {}
    distill_rewards = None
    if distilling:
        distill_rewards, reverse_kl = algos.distill_token_rewards(
            old_logprobs, teacher_logprobs, mask, cfg.distill_coef
        )  # [batch, T] each
        metrics |= algos.distill_metrics(reverse_kl, distill_rewards, mask)
        if algos.distill_advantage_route(cfg.advantage_estimator) == "token_rewards":
            token_rewards = token_rewards + distill_rewards
    kl_mean = None
    if ref_logprobs is not None and old_logprobs is not None:
        kl = algos.kl_penalty(old_logprobs, ref_logprobs, cfg.kl_estimator) * mask  # [batch, T]
        kl_mean = (kl.sum() / mask.sum().clamp(min=1)).item()
        metrics["policy/kl"] = kl_mean
        if cfg.kl_mode == "reward":
            token_rewards = token_rewards - kl_coef * kl
    adv, returns = algos.compute_advantages(
        cfg.advantage_estimator,
        whiten=cfg.whiten_advantages,
        token_rewards=token_rewards,
        action_mask=mask,
        values=values,
        group_ids=None if group_ids is None else torch.as_tensor(list(group_ids)),
        baseline_rewards=baseline_rewards,
        gamma=cfg.gamma,
        lam=cfg.lam,
        eps=cfg.grpo_eps,
        norm_by_std=cfg.grpo_norm_by_std,
    )
    if distill_rewards is not None and algos.distill_advantage_route(cfg.advantage_estimator) == "after":
        adv = adv + distill_rewards  # per token, after the group normalisation: never summed, never normalised
        returns = adv.clone()  # the outcome estimators' returns equal their advantages
    valid = adv[mask]
    metrics |= {"adv/mean": valid.mean().item(), "adv/std": valid.std().item() if valid.numel() > 1 else 0.0}
    metrics |= {"adv/max": valid.max().item(), "adv/min": valid.min().item()}
    metrics["adv/nonzero_frac"] = (valid != 0).float().mean().item() if valid.numel() else 0.0
    metrics["returns/mean"] = returns[mask].mean().item()
    return StepAdvantages(adv, returns, kl_mean, metrics)


def no_signal_reason(cfg, rewards: torch.Tensor, group_ids: Sequence[int] | None) -> str:
    """Why every advantage of a step is zero, in words a user can act on."""
    values = sorted({round(float(r), 9) for r in rewards.tolist()})
    if len(values) == 1:
        why = f"every response of the step got the same reward ({values[0]:g})"
        if values[0] == 0:
            why += (
                ": the model never earns the reward. Check reward_fn / extract_mode against what the model writes "
                "(logs/<exp>/generations), the prompt_template and stop strings, or start from a stronger model"
            )
        return why
    if cfg.advantage_estimator in GROUP_ESTIMATORS and group_ids is not None:
        return (
            "within every prompt group all responses got the same reward (zero variance), so the group baselines "
            "cancel it: raise n_samples_per_prompt, use dynamic_sampling=true, or use easier/harder prompts"
        )
    return "the advantage estimator returned 0 for every token"


class NoSignalMonitor:
    """Warns when a step has no learning signal (every advantage exactly 0): on the first such step, then on
    every ``every``-th one, each time with the reason and the count so far."""

    def __init__(self, every: int = 10):
        self.every = every
        self.count = 0

    def check(self, step: int, advantages: torch.Tensor, action_mask: torch.Tensor, reason: Callable[[], str]) -> bool:
        """Returns True (and maybe warns) when every valid advantage is 0; ``reason()`` is asked only then."""
        valid = advantages[action_mask.bool()]
        if valid.numel() and bool((valid != 0).any()):
            return False
        self.count += 1
        if self.count == 1 or self.count % self.every == 0:
            logger.warning(
                f"step {step}: no learning signal, every advantage is 0 ({self.count} such step(s) so far): "
                f"{reason()}. The policy gets no gradient from the advantages."
            )
        return True

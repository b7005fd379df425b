"""On-policy distillation: the per-token reward of a frozen teacher on the student's own samples.

For sample i and response token t (a token the student sampled), with the student's (rollout policy's) and the
teacher's log-probs of that token::

    d_{i,t}   = log pi_old(y_t | x, y_<t) - log pi_teacher(y_t | x, y_<t)        # [batch, T]: reverse-KL sample
    r^D_{i,t} = -distill_coef * d_{i,t} * m_{i,t}                                # [batch, T]: the distillation reward

``d`` is the single-sample (k1) estimate of the reverse KL(pi_old || pi_teacher) at token t: its expectation under
the student's own sampling is the per-token reverse KL, so maximising sum_t r^D minimises the student's reverse KL
to the teacher on the states the student visits (Agarwal et al. 2024, GKD, arXiv:2306.13649; Thinking Machines,
"On-policy distillation", 2025; Qwen3's small models). Masked positions (padding, tool-output holes) get 0.

How ``r^D`` meets an advantage estimator is :func:`distill_advantage_route`; ``reasonrl.loop.learning_signal``
applies it (see docs/algorithms.md, "On-policy distillation").
"""

from __future__ import annotations

import torch

from reasonrl.algos.utils import masked_sum

# Estimators that score a sample by one number (the sum of its token rewards) and compare samples of a prompt
# group: a per-token reward would be summed over the response and group-normalised, losing where it was earned.
# The distillation term is added to their advantages after normalisation instead (discount 0, never normalised).
SEQUENCE_SCORE_ESTIMATORS = frozenset({"grpo", "dr_grpo", "rloo", "reinforce_plus_plus_baseline"})


@torch.no_grad()
def distill_token_rewards(
    old_logprobs: torch.Tensor, teacher_logprobs: torch.Tensor, action_mask: torch.Tensor, coef: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r^D, d)``: the distillation reward ``-coef * d`` and the reverse-KL sample ``d = logp_old - logp_teacher``,
    both float32 ``[batch, T]`` with zeros where ``action_mask`` is 0.

    Args:
        old_logprobs: [batch, T] log-probs of the sampled tokens under the policy that generated them.
        teacher_logprobs: [batch, T] log-probs of the same tokens under the teacher (same tokenizer, same
            temperature).
        action_mask: [batch, T] the loss mask (1 = a response token trained on).
        coef: ``distill_coef`` (> 0).
    """
    if old_logprobs.shape != teacher_logprobs.shape or old_logprobs.shape != action_mask.shape:
        raise ValueError(
            f"distillation needs [batch, T] log-probs of one shape: old {tuple(old_logprobs.shape)}, teacher "
            f"{tuple(teacher_logprobs.shape)}, action_mask {tuple(action_mask.shape)}"
        )
    mask = action_mask.bool()
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    d = torch.where(mask, old_logprobs.float() - teacher_logprobs.float(), zeros)  # [batch, T]
    return -coef * d, d


def distill_advantage_route(estimator: str) -> str:
    """Where the distillation reward enters ``estimator``'s advantages:

    * ``"after"`` (sequence-score estimators, :data:`SEQUENCE_SCORE_ESTIMATORS`: grpo, dr_grpo, rloo,
      reinforce_plus_plus_baseline): ``A_{i,t} = A^outcome_{i,t} + r^D_{i,t}``, added after the estimator and its
      batch normalisation: the per-token term is neither summed over the response nor group-normalised
      (discount 0: each token is credited with its own reverse KL only);
    * ``"token_rewards"`` (gae, reinforce_plus_plus, remax): ``r^D`` is added to the token rewards the estimator
      reads, like the KL penalty of ``kl_mode=reward``: GAE bootstraps it with the critic, REINFORCE++ and ReMax
      take its reward-to-go.
    """
    return "after" if estimator in SEQUENCE_SCORE_ESTIMATORS else "token_rewards"


def distill_metrics(reverse_kl: torch.Tensor, rewards: torch.Tensor, action_mask: torch.Tensor) -> dict[str, float]:
    """``distill/reverse_kl``: token mean of ``d`` over the loss tokens; ``distill/reward_mean``: the mean over
    samples of each sample's summed distillation reward ``sum_t r^D_{i,t}``. Inputs ``[batch, T]``."""
    mask = action_mask.bool()
    tokens = mask.sum().clamp(min=1)
    per_sample = masked_sum(rewards, mask, dim=-1)  # [batch]
    return {
        "distill/reverse_kl": (reverse_kl.sum() / tokens).item(),
        "distill/reward_mean": per_sample.mean().item() if per_sample.numel() else 0.0,
    }

"""reasonrl.algos: the RL math as pure, documented torch functions (no Ray / DeepSpeed / vLLM).

Modules, one job each:

* ``advantages``    advantage estimators (registry ``ADVANTAGE_ESTIMATORS``, ``get_advantage_estimator``)
* ``policy_losses`` policy losses (registry ``POLICY_LOSSES``, ``get_policy_loss``) and the clipped value loss
* ``loss_settings`` the losses' settings of a run (``PolicyLossConfig``, ``ValueLossConfig``) and a step's
  coefficients (``PolicyStepCoefs``: KL loss, entropy bonus)
* ``aggregation``   loss aggregation modes (``AGG_MODES``, ``aggregate_loss``)
* ``kl``            KL estimators (``KL_ESTIMATORS``), KL loss / KL-in-reward, KL controllers
* ``entropy``       chunked entropy from logits, entropy bonus, Skywork-OR1 adaptive entropy controller
* ``distill``       on-policy distillation: the teacher's per-token reward and where it enters the advantages
* ``dapo``          DAPO soft overlong punishment and zero-variance group filter
* ``rollout_correction`` rollout-vs-trainer importance weights (TIS / MIS, ``ROLLOUT_CORRECTION_MODES``) and metrics
* ``utils``         masked statistics, whitening, prompt-group statistics

Tensor conventions: token tensors are [batch, seq] over response tokens, ``action_mask`` [batch, seq] the loss
mask (1 = a response token trained on; 0 = padding, or a masked token inside a response such as tool output),
``group_ids`` LongTensor [batch]. See docs/algorithms.md for the formulas and supported names.
"""

from reasonrl.algos.advantages import (
    ADVANTAGE_ESTIMATORS,
    BASELINE_ESTIMATORS,
    WHITENED_BY_DEFINITION,
    compute_advantages,
    dr_grpo_advantages,
    gae_advantages,
    get_advantage_estimator,
    grpo_advantages,
    reinforce_plus_plus_advantages,
    reinforce_plus_plus_baseline_advantages,
    remax_advantages,
    rloo_advantages,
)
from reasonrl.algos.aggregation import AGG_MODES, aggregate_loss, check_agg_mode, count_tokens_and_seqs
from reasonrl.algos.dapo import dynamic_sampling_keep_mask, soft_overlong_punishment, zero_variance_groups
from reasonrl.algos.distill import (
    SEQUENCE_SCORE_ESTIMATORS,
    distill_advantage_route,
    distill_metrics,
    distill_token_rewards,
)
from reasonrl.algos.entropy import AdaptiveEntropyController, entropy_bonus, entropy_from_logits
from reasonrl.algos.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    get_kl_controller,
    kl_estimator_names,
    kl_loss,
    kl_penalty,
    kl_shaped_token_rewards,
)
from reasonrl.algos.policy_losses import (
    POLICY_LOSSES,
    cispo_policy_loss,
    get_policy_loss,
    gspo_policy_loss,
    ppo_policy_loss,
    reinforce_policy_loss,
    value_loss,
)
from reasonrl.algos.rollout_correction import (
    ROLLOUT_CORRECTION_MODES,
    check_rollout_correction_mode,
    rollout_correction,
    rollout_correction_metrics,
    rollout_log_ratio,
)
from reasonrl.algos.utils import (
    group_stats,
    masked_mean,
    masked_scale,
    masked_sum,
    masked_var,
    masked_whiten,
    outcome_to_token_rewards,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGG_MODES",
    "BASELINE_ESTIMATORS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "ROLLOUT_CORRECTION_MODES",
    "SEQUENCE_SCORE_ESTIMATORS",
    "WHITENED_BY_DEFINITION",
    "AdaptiveEntropyController",
    "AdaptiveKLController",
    "FixedKLController",
    "aggregate_loss",
    "check_agg_mode",
    "check_rollout_correction_mode",
    "cispo_policy_loss",
    "compute_advantages",
    "count_tokens_and_seqs",
    "distill_advantage_route",
    "distill_metrics",
    "distill_token_rewards",
    "dr_grpo_advantages",
    "dynamic_sampling_keep_mask",
    "entropy_bonus",
    "entropy_from_logits",
    "gae_advantages",
    "get_advantage_estimator",
    "get_kl_controller",
    "get_policy_loss",
    "group_stats",
    "grpo_advantages",
    "gspo_policy_loss",
    "kl_estimator_names",
    "kl_loss",
    "kl_penalty",
    "kl_shaped_token_rewards",
    "masked_mean",
    "masked_scale",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "outcome_to_token_rewards",
    "ppo_policy_loss",
    "reinforce_plus_plus_advantages",
    "reinforce_plus_plus_baseline_advantages",
    "reinforce_policy_loss",
    "remax_advantages",
    "rloo_advantages",
    "rollout_correction",
    "rollout_correction_metrics",
    "rollout_log_ratio",
    "soft_overlong_punishment",
    "value_loss",
    "zero_variance_groups",
]

"""Refusals of the on-policy distillation fields (``teacher_pretrain``, ``distill_coef``, ``distill_outcome_reward``;
docs/algorithms.md, "On-policy distillation"), before anything starts: each message names the field and what to do.
That the teacher shares the policy's tokenizer needs the tokenizers loaded: it is checked one layer up, by the run
(:func:`reasonrl.run.checks.teacher_tokenizer_problems`)."""

from __future__ import annotations

import math

from reasonrl.config.model_paths import model_problems


def distill_problems(cfg) -> list[str]:
    """Problems of the distillation fields: the teacher's model, ``distill_coef`` out of range (checked even without
    a teacher: a typo stays a typo), a teacher with no reference shape to be placed on, and combinations that
    cannot train what they say."""
    problems = []
    if not (math.isfinite(cfg.distill_coef) and cfg.distill_coef > 0):
        problems.append(
            f"distill_coef={cfg.distill_coef!r}: must be a finite number > 0 (the scale of the per-token "
            "distillation reward; 1.0 is the usual value)"
        )
    teacher = cfg.teacher_pretrain
    if teacher is None:
        if not cfg.distill_outcome_reward:
            problems.append(
                "distill_outcome_reward=false drops the outcome reward in favour of a teacher's, but teacher_pretrain "
                "is not set: give the teacher model in teacher_pretrain, or set distill_outcome_reward=true"
            )
        return problems
    problems += model_problems("teacher_pretrain", teacher)
    if cfg.ref_num_nodes < 1 or cfg.ref_devices_per_node < 1:
        problems.append(
            f"teacher_pretrain={teacher!r}: the teacher is placed exactly as the reference model, on "
            f"ref_num_nodes x ref_devices_per_node devices, but that is {cfg.ref_num_nodes} x "
            f"{cfg.ref_devices_per_node}: set both >= 1 (the reference itself still runs only with a kl_mode)"
        )
    if cfg.dynamic_sampling and not cfg.distill_outcome_reward:
        problems.append(
            "dynamic_sampling=true drops prompt groups whose outcome rewards are all equal, but "
            "distill_outcome_reward=false trains on the teacher's reward alone, which every such group still has: "
            "set dynamic_sampling=false, or distill_outcome_reward=true"
        )
    return problems

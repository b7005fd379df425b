"""``PPOTrainer`` refuses roles that do not match its config before any step (``loop.trainer._check_roles``)."""

from __future__ import annotations

import pytest

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.loop.trainer import Roles, _check_roles

KL = dict(kl_mode="loss", init_kl_coef=1e-3)


def test_a_reference_role_is_needed_only_where_the_policy_does_not_hold_the_reference():
    policy = object()
    fused = TinyGRPOCPUConfig(**KL)  # CPU, colocated, one rank: the policy holds the reference
    assert fused.reference_fused
    _check_roles(fused, Roles(policy=policy, engines=[]))
    own = TinyGRPOCPUConfig(**KL, reference_process="own")
    _check_roles(own, Roles(policy=policy, engines=[], ref=object()))
    with pytest.raises(ValueError, match=r"reference_process='own' resolves to 'own' here\), but no reference group"):
        _check_roles(own, Roles(policy=policy, engines=[]))
    split = TinyGRPOCPUConfig(**KL, colocate_all=False)  # auto: split placement keeps the reference's own role
    with pytest.raises(ValueError, match=r"reference_process='auto' resolves to 'own'"):
        _check_roles(split, Roles(policy=policy, engines=[]))
    _check_roles(TinyGRPOCPUConfig(), Roles(policy=policy, engines=[]))  # no KL: no reference at all


def test_a_teacher_group_is_needed_for_teacher_pretrain():
    cfg = TinyGRPOCPUConfig(teacher_pretrain="tiny-demo")
    with pytest.raises(ValueError, match=r"teacher_pretrain='tiny-demo' needs a teacher group"):
        _check_roles(cfg, Roles(policy=object(), engines=[]))
    _check_roles(cfg, Roles(policy=object(), engines=[], teacher=object()))

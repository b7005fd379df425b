"""``reference_process``: where the frozen reference runs (``reasonrl.config.reference_process``)."""

from __future__ import annotations

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.memory import setup_from_config
from reasonrl.config.reference_process import fusion_blocker, reference_process_problems
from reasonrl.planning import memory_model as mm
from reasonrl.run.role_settings import worker_config

# the CPU recipes' shape: one rank per role, every role and the engine on one shared bundle, a KL loss
CPU_KL = dict(
    pretrain="tiny",
    device="cpu",
    bf16=False,
    generate_max_len=256,
    advantage_estimator="grpo",
    policy_devices_per_node=1,
    ref_devices_per_node=1,
    vllm_num_engines=1,
    colocate_all=True,
    kl_mode="loss",
    init_kl_coef=1e-3,
)


def cfg(**kw) -> BasePPOExpConfig:
    return BasePPOExpConfig(**{**CPU_KL, **kw})


def test_auto_puts_the_reference_in_the_policy_on_cpu_and_places_no_reference_role():
    c = cfg()
    assert c.reference_process == "auto" and fusion_blocker(c) is None
    assert c.reference_fused and c.reference_in_policy
    assert not c.role_resources()["ref"].enabled
    ((group),) = c.placement_requests(device="cpu")
    assert set(group.roles) == {"policy", "vllm"}
    # the policy ranks get the reference's settings; its weights still count in the memory model
    policy = worker_config(c, "policy", pad_token_id=3)
    assert policy.reference == worker_config(c, "ref", pad_token_id=3)
    assert policy.reference.model_path == policy.model_path and policy.reference.pad_token_id == 3
    assert setup_from_config(c, model=mm.QWEN25["Qwen/Qwen2.5-0.5B"]).ref_dp == 1
    # 'own' keeps the role, and the policy holds nothing
    own = cfg(reference_process="own")
    assert not own.reference_fused and own.role_resources()["ref"].enabled
    assert worker_config(own, "policy").reference is None


def test_no_reference_or_a_lora_policy_is_never_fused():
    assert not cfg(kl_mode="none", init_kl_coef=0.0).reference_fused
    lora = cfg(lora_rank=8, reference_process="policy")
    assert not lora.reference_fused and lora.reference_in_policy  # the adapter switched off is its reference
    assert worker_config(lora, "policy").reference is None


@pytest.mark.parametrize(
    ("changes", "names"),
    [
        (dict(device="gpu"), "device=cpu"),
        (dict(ref_devices_per_node=2), "ref_devices_per_node=2"),
        (dict(colocate_all=False), "colocate_all or colocate_policy_ref"),
        (dict(sequence_parallel_size=2, policy_devices_per_node=2, ref_devices_per_node=2), "sequence_parallel"),
        (dict(ref_offload_params=True), "policy ZeRO-0, ref ZeRO-3"),
    ],
)
def test_auto_keeps_the_reference_role_where_the_policy_cannot_host_it_and_policy_is_refused(changes, names):
    auto = cfg(**changes)
    assert names in fusion_blocker(auto)
    assert not auto.reference_fused and auto.reference_in_policy is False
    assert reference_process_problems(auto) == []  # auto: nothing to refuse
    explicit = cfg(reference_process="policy", **changes)
    (problem,) = reference_process_problems(explicit)
    assert problem.startswith("reference_process='policy' needs") and names in problem


def test_split_placement_with_policy_and_reference_together_can_host_it():
    c = cfg(colocate_all=False, colocate_policy_ref=True)
    assert c.reference_fused and not c.role_resources()["ref"].enabled


def test_validation_names_the_field():
    with pytest.raises(ConfigError, match=r"reference_process='policy' needs the reference placed with the policy"):
        cfg(reference_process="policy", colocate_all=False).validate()
    with pytest.raises(ConfigError, match=r"reference_process='separate' is unknown; valid: auto, own, policy"):
        cfg(reference_process="separate").validate()
    cfg(reference_process="policy").validate()
    cfg(reference_process="own").validate()

"""``zero_stage`` (``reasonrl.config.zero_stages``): ``auto`` resolved per DeepSpeed role, explicit stages kept, the
field on the command line and in validation, the memory model's per-role stages, and the resume comparison of the
stages the roles run at (a DeepSpeed checkpoint loads only at the stage that wrote it)."""

from __future__ import annotations

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config import zero_stages as zs
from reasonrl.config.memory import setup_from_config
from reasonrl.config.resume import check_resume_config, field_defaults, resume_changes
from reasonrl.planning import memory_model as mm

# one rank per role, fp32, on the CPU: what the CPU recipes (playground/tiny_ppo_cpu.py) run
ONE_RANK = dict(
    pretrain="tiny",
    device="cpu",
    bf16=False,
    generate_max_len=512,
    policy_devices_per_node=1,
    ref_devices_per_node=1,
    critic_devices_per_node=1,
    reward_devices_per_node=1,
    vllm_num_engines=1,
)
REWARD = dict(reward_num_nodes=1)  # a one-rank reward model (without its folder: not for validate())


def one_rank(**overrides) -> BasePPOExpConfig:
    return BasePPOExpConfig(**{**ONE_RANK, **overrides})


ROLES = tuple(r for r in zs.ROLES if r != "teacher")  # the roles with fields of their own


def stages(cfg, roles=ROLES) -> dict[str, int]:
    """The roles' stages; the distillation teacher is sized as the reference, so it always has the ref's stage."""
    out = zs.role_zero_stages(cfg, roles)
    assert zs.role_zero_stage(cfg, "teacher") == out["ref"]
    return out


def with_reward(**overrides) -> BasePPOExpConfig:
    return one_rank(**REWARD, **overrides)


# ------------------------------------------------------------------------------------------ the rule
def test_auto_is_the_default_and_gives_one_rank_roles_zero_0():
    assert BasePPOExpConfig().zero_stage == "auto"
    assert stages(with_reward()) == {"policy": 0, "ref": 0, "critic": 0, "reward": 0}
    assert all(zs.auto_needs_zero(with_reward(), role) is None for role in zs.ROLES)
    assert zs.auto_needs_zero(one_rank(), "reward") == "0 ranks"  # no reward model placed: its stage is moot


def test_auto_gives_zero_3_to_roles_of_several_ranks():
    cfg = with_reward(policy_devices_per_node=2, ref_num_nodes=2, vllm_num_engines=2)
    assert stages(cfg) == {"policy": 3, "ref": 3, "critic": 0, "reward": 0}
    assert zs.auto_needs_zero(cfg, "policy") == "2 ranks"
    assert stages(BasePPOExpConfig()) == dict.fromkeys(ROLES, 3)  # the 8-device defaults


@pytest.mark.parametrize(
    "overrides, expected, reason",
    [
        # parameter offload is ZeRO-3's: the frozen roles only (the trained ones do not use it)
        (dict(ref_offload_params=True), {"policy": 0, "ref": 3, "critic": 0, "reward": 3}, "ref_offload_params"),
        # ZeRO-Offload needs a ZeRO stage: 3, the tested path, for the trained roles
        (dict(optimizer_offload=True), {"policy": 3, "ref": 0, "critic": 3, "reward": 0}, "optimizer_offload"),
        # ZeRO-0 would train bf16 weights without fp32 master weights or fp32 gradient accumulation
        (dict(bf16=True), {"policy": 3, "ref": 0, "critic": 3, "reward": 0}, "bf16"),
        # colocated on a GPU (or a device not known to be the CPU), a trained role offloads its states between phases
        (dict(device="gpu"), {"policy": 3, "ref": 0, "critic": 3, "reward": 0}, "colocate_all"),
        (dict(device="auto"), {"policy": 3, "ref": 0, "critic": 3, "reward": 0}, "colocate_all"),
    ],
)
def test_auto_keeps_zero_3_where_a_one_rank_role_needs_it(overrides, expected, reason):
    cfg = with_reward(**overrides)
    assert stages(cfg) == expected
    for role, stage in expected.items():
        why = zs.auto_needs_zero(cfg, role)
        assert (why is None) == (stage == 0) and (stage == 0 or reason in why), (role, why)


def test_split_placement_on_a_gpu_lets_one_rank_fp32_roles_run_zero_0():
    assert stages(with_reward(device="gpu", colocate_all=False)) == dict.fromkeys(ROLES, 0)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_an_explicit_stage_is_every_roles_stage(stage):
    assert stages(with_reward(zero_stage=stage)) == dict.fromkeys(ROLES, stage)
    assert stages(BasePPOExpConfig(zero_stage=stage)) == dict.fromkeys(ROLES, stage)


def test_unknown_role_raises():
    with pytest.raises(ValueError, match="unknown role 'vllm'"):
        zs.role_zero_stage(one_rank(), "vllm")


def test_active_roles_follow_the_algorithm():
    assert zs.active_roles(one_rank()) == ("policy", "critic")  # gae, no KL by default
    grpo_kl = one_rank(advantage_estimator="grpo", kl_mode="loss", init_kl_coef=0.01)
    assert zs.active_roles(grpo_kl) == ("policy", "ref")
    assert zs.active_roles(one_rank(advantage_estimator="grpo", kl_mode="loss", lora_rank=8)) == ("policy",)


# ------------------------------------------------------------------------------------------ the field
def test_command_line_gives_auto_as_text_and_stages_as_ints():
    assert one_rank(zero_stage=3).with_overrides({"zero_stage": "auto"}).zero_stage == "auto"
    cfg = one_rank().with_overrides({"zero_stage": "2"})
    assert cfg.zero_stage == 2 and isinstance(cfg.zero_stage, int)
    assert BasePPOExpConfig.from_cli(["zero_stage=0", "pretrain=tiny"]).zero_stage == 0


def test_validation_accepts_auto_and_stages_and_names_the_choices():
    for stage in ("auto", 0, 3):
        one_rank(zero_stage=stage).validate()
    for bad in (4, "three"):
        with pytest.raises(ConfigError, match=r"zero_stage=.* is unknown; valid: auto, 0, 1, 2, 3"):
            one_rank(zero_stage=bad).validate()
    with pytest.raises(ConfigError, match=r"zero_stage=4 is unknown"):
        one_rank().with_overrides({"zero_stage": "4"}).validate()


def test_explicit_stages_that_an_offload_cannot_run_are_refused_before_the_run():
    with pytest.raises(ConfigError, match=r"optimizer_offload=true needs a ZeRO stage for the policy"):
        one_rank(zero_stage=0, optimizer_offload=True).validate()
    cfg = one_rank(zero_stage=2, ref_offload_params=True, advantage_estimator="grpo", kl_mode="loss")
    with pytest.raises(ConfigError, match=r"ref_offload_params=true .* the ref runs at ZeRO-2"):
        cfg.validate()
    assert zs.stage_problems(one_rank(optimizer_offload=True, ref_offload_params=True)) == []  # auto never does


def test_the_memory_model_gets_each_roles_stage():
    s = setup_from_config(one_rank(pretrain="Qwen/Qwen2.5-0.5B", ref_num_nodes=2))
    assert s.stage("policy") == 0 and s.stage("critic") == 0 and s.stage("ref") == 3
    assert mm.gather_bytes(s, "policy") == 0 and mm.gather_bytes(s, "ref") > 0
    full = mm.param_bytes(s, 1, role="policy")
    assert full == 4 * s.model.num_params and mm.param_bytes(s, 2, role="ref") == full // 2
    # an explicit stage: the same for every role, as before
    s3 = setup_from_config(one_rank(pretrain="Qwen/Qwen2.5-0.5B", zero_stage=3))
    assert {s3.stage(r) for r in ("policy", "critic", "ref", "reward_model")} == {3} and s3.zero_stage == 3


# ------------------------------------------------------------------------------------------ resume
def saved_with(**fields) -> dict:
    return one_rank(**fields).to_dict()


def test_an_old_checkpoint_at_zero_3_is_no_change_where_auto_also_gives_3():
    saved = BasePPOExpConfig(pretrain="tiny", zero_stage=3).to_dict()  # the old default, 8 ranks
    assert resume_changes(saved, BasePPOExpConfig(pretrain="tiny")) == []  # auto -> 3 everywhere


def test_auto_keeps_the_stage_of_a_checkpoint_written_at_another():
    defaults = field_defaults(BasePPOExpConfig)
    saved = saved_with(zero_stage=3)  # written at ZeRO-3, the default before auto
    cfg = one_rank()
    assert [c.name for c in resume_changes(saved, cfg)] == ["zero_stage"]
    assert zs.adopt_saved_zero_stage(cfg, saved, defaults) == 3
    assert cfg.zero_stage == 3 and resume_changes(saved, cfg) == []
    # a checkpoint whose config does not record the field was written at the old default
    saved.pop("zero_stage")
    cfg = one_rank()
    assert zs.adopt_saved_zero_stage(cfg, saved, defaults) == 3 and cfg.zero_stage == 3
    # nothing to keep: same stages, or an explicit stage (refused below instead)
    assert zs.adopt_saved_zero_stage(one_rank(), saved_with(), defaults) is None
    explicit = one_rank(zero_stage=0)
    assert zs.adopt_saved_zero_stage(explicit, saved_with(zero_stage=3), defaults) is None
    assert explicit.zero_stage == 0


def test_a_stage_this_run_cannot_use_is_not_kept():
    """The checkpoint ran at ZeRO-0; this run names optimizer_offload as an allowed change, which needs a ZeRO stage:
    auto cannot keep 0, and the resume is refused."""
    saved = saved_with(zero_stage=0)
    cfg = one_rank(optimizer_offload=True, resume_allow_changes=["optimizer_offload"])
    assert zs.adopt_saved_zero_stage(cfg, saved, field_defaults(BasePPOExpConfig)) is None
    assert cfg.zero_stage == "auto"
    (change,) = resume_changes(saved, cfg)
    assert change.name == "zero_stage" and "the policy was written at ZeRO-0, this run gives it ZeRO-3" in change.note


def test_a_different_explicit_stage_is_refused_naming_zero_stage_and_the_ways_out(tmp_path):
    one_rank(zero_stage=3).save_json(tmp_path)
    cfg = one_rank(zero_stage=0, resume_allow_changes=["zero_stage"])  # naming it cannot make DeepSpeed load it
    with pytest.raises(ConfigError) as err:
        check_resume_config(cfg, tmp_path)
    text = str(err.value)
    assert "zero_stage: checkpoint 3, this run 0" in text
    assert "the policy was written at ZeRO-3, this run gives it ZeRO-0" in text and "critic" in text
    assert "loads only at the ZeRO stage that wrote it" in text
    assert "resume with zero_stage=3 (or zero_stage=auto" in text and "resume=none" in text
    assert "resume_allow_changes=zero_stage" not in text
    # a checkpoint written with auto resumes with auto, and with the explicit stage auto gave it
    one_rank().save_json(tmp_path)
    assert check_resume_config(one_rank(), tmp_path) == []
    assert check_resume_config(one_rank(zero_stage=0), tmp_path) == []

"""Each role's ``WorkerConfig`` gets its own ZeRO stage (``reasonrl.run.role_settings``: ``zero_stage=auto`` resolved
per role), and a resume keeps or refuses the stage of its checkpoint before anything starts
(``reasonrl.run.lifecycle.resolve_resume``). No Ray, no model loaded."""

from __future__ import annotations

import pytest
from loguru import logger

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.run.lifecycle import resolve_resume
from reasonrl.run.role_settings import worker_config
from reasonrl.utils.checkpoint import CheckpointManager

ONE_RANK = dict(
    pretrain="tiny",
    device="cpu",
    bf16=False,
    generate_max_len=512,
    max_steps=4,
    policy_devices_per_node=1,
    ref_devices_per_node=1,
    critic_devices_per_node=1,
    reward_num_nodes=1,
    reward_devices_per_node=1,
    reward_pretrain="tiny",
    vllm_num_engines=1,
    kl_mode="loss",
    init_kl_coef=0.01,
)


def one_rank(tmp_path=None, **overrides) -> BasePPOExpConfig:
    dirs = dict(ckpt_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs")) if tmp_path else {}
    return BasePPOExpConfig(**{**ONE_RANK, **dirs, **overrides})


def role_stages(cfg) -> dict[str, int]:
    return {
        role: worker_config(cfg, role, num_rollout_steps=1).zero_stage for role in ("policy", "ref", "critic", "reward")
    }


def test_auto_gives_each_role_its_stage():
    assert role_stages(one_rank()) == {"policy": 0, "ref": 0, "critic": 0, "reward": 0}
    mixed = one_rank(policy_devices_per_node=2, vllm_num_engines=2, ref_offload_params=True)
    assert role_stages(mixed) == {"policy": 3, "ref": 3, "critic": 0, "reward": 3}
    assert role_stages(one_rank(optimizer_offload=True)) == {"policy": 3, "ref": 0, "critic": 3, "reward": 0}
    assert role_stages(one_rank(bf16=True)) == {"policy": 3, "ref": 0, "critic": 3, "reward": 0}
    eight = BasePPOExpConfig(pretrain="tiny", reward_num_nodes=1, reward_pretrain="tiny")
    assert set(role_stages(eight).values()) == {3}  # 8 ranks each


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_an_explicit_stage_reaches_every_role_as_before(stage):
    assert set(role_stages(one_rank(zero_stage=stage)).values()) == {stage}


def write_checkpoint(cfg: BasePPOExpConfig, step: int = 2) -> None:
    manager = CheckpointManager.for_run(cfg)
    with manager.staging(step) as tmp:
        (tmp / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
        cfg.save_json(tmp / "config.json")


@pytest.fixture
def warnings():
    lines: list[str] = []
    sink = logger.add(lambda message: lines.append(str(message)), level="WARNING")
    yield lines
    logger.remove(sink)


def test_resume_with_auto_keeps_the_zero_3_of_a_checkpoint_written_before_auto(tmp_path, warnings):
    write_checkpoint(one_rank(tmp_path, zero_stage=3))  # what every run wrote under the old default
    cfg = one_rank(tmp_path)
    assert cfg.zero_stage == "auto" and role_stages(cfg)["policy"] == 0
    assert resolve_resume(cfg).name == "step_2"
    assert cfg.zero_stage == 3 and set(role_stages(cfg).values()) == {3}  # the workers load the checkpoint's stage
    (line,) = [w for w in warnings if "resume keeps zero_stage=3" in w]
    assert "policy ZeRO-0" in line and "resume=none" in line


def test_resume_with_auto_of_a_checkpoint_written_with_auto_changes_nothing(tmp_path, warnings):
    write_checkpoint(one_rank(tmp_path))
    cfg = one_rank(tmp_path)
    assert resolve_resume(cfg).name == "step_2" and cfg.zero_stage == "auto"
    assert not [w for w in warnings if "zero_stage" in w]


def test_resume_at_another_explicit_stage_is_refused_before_anything_starts(tmp_path):
    write_checkpoint(one_rank(tmp_path, zero_stage=3))
    cfg = one_rank(tmp_path, zero_stage=0)
    with pytest.raises(ConfigError, match=r"(?s)resume refused.*zero_stage: checkpoint 3, this run 0.*policy was "
                       r"written at ZeRO-3, this run gives it ZeRO-0.*resume with zero_stage=3"):  # fmt: skip
        resolve_resume(cfg)
    assert cfg.zero_stage == 0
    assert (tmp_path / "ckpt" / cfg.exp_name / "step_2").is_dir()  # refused: nothing moved aside


def test_sequence_parallel_size_reaches_the_roles_it_is_checked_for():
    """policy, reference and critic get ``sequence_parallel_size`` (validate() checks their heads and ranks); the
    teacher and the reward model run whole sequences. Set after validation (one rank per role here: validation
    refuses 2)."""
    cfg = one_rank()
    cfg.sequence_parallel_size = 2
    sizes = {role: worker_config(cfg, role).sequence_parallel_size for role in ("policy", "ref", "critic", "reward")}
    assert sizes == {"policy": 2, "ref": 2, "critic": 2, "reward": 1}
    assert worker_config(one_rank(), "policy").sequence_parallel_size == 1

"""The on-policy distillation fields refused before anything starts (``reasonrl.config.distill``), each message naming
the field and what to do; a teacher whose tokenizer differs from the student's refused by the run's checks
(``reasonrl.run.checks``) with the reason; and the teacher planned exactly as the reference (placement groups,
memory model, ZeRO stage, worker settings)."""

from __future__ import annotations

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.distill import distill_problems
from reasonrl.config.memory import setup_from_config
from reasonrl.planning import memory_model as mm
from reasonrl.run.checks import teacher_tokenizer_problems, validate_run
from reasonrl.run.role_settings import worker_config

CPU = dict(device="cpu", bf16=False, generate_max_len=256, vllm_num_engines=1)
ONE = dict(policy_devices_per_node=1, ref_devices_per_node=1, critic_devices_per_node=1, colocate_all=False, **CPU)


def cfg(**kw) -> BasePPOExpConfig:
    return BasePPOExpConfig(**{"pretrain": "tiny", "advantage_estimator": "grpo", **kw})


def test_a_teacher_with_the_defaults_passes_and_no_teacher_has_no_problem():
    assert distill_problems(cfg()) == []
    assert distill_problems(cfg(teacher_pretrain="tiny")) == []
    assert distill_problems(cfg(teacher_pretrain="tiny", distill_outcome_reward=False, distill_coef=0.3)) == []


@pytest.mark.parametrize(
    ("fields", "start", "words"),
    [
        ({"distill_coef": 0.0}, "distill_coef=0.0", "must be a finite number > 0"),
        ({"distill_coef": float("nan"), "teacher_pretrain": "tiny"}, "distill_coef=nan", "must be a finite number"),
        (
            {"distill_outcome_reward": False},
            "distill_outcome_reward=false",
            "give the teacher model in teacher_pretrain",
        ),
        (
            {"teacher_pretrain": "tiny", "ref_num_nodes": 0},
            "teacher_pretrain='tiny': the teacher is placed",
            "set both",
        ),
        (
            {"teacher_pretrain": "tiny", "distill_outcome_reward": False, "dynamic_sampling": True},
            "dynamic_sampling=true drops prompt groups",
            "set dynamic_sampling=false",
        ),
        ({"teacher_pretrain": "/no/such/teacher"}, "teacher_pretrain='/no/such/teacher'", ""),
    ],
)
def test_each_refusal_names_the_field_and_what_to_do(fields, start, words):
    problems = distill_problems(cfg(**fields))
    assert any(p.startswith(start) and words in p for p in problems), problems
    with pytest.raises(ConfigError) as err:  # and validate() refuses the config with it
        cfg(**ONE, **fields).validate()
    assert start in str(err.value)


def test_a_teacher_whose_context_is_shorter_than_a_sample_is_refused():
    """tiny-demo has 256 positions; tiny (the student) 2048."""
    with pytest.raises(ConfigError) as err:
        cfg(**{**ONE, "teacher_pretrain": "tiny-demo", "max_prompt_len": 200, "generate_max_len": 100}).validate()
    assert "= 300 tokens exceed the context of teacher_pretrain='tiny-demo' (max_position_embeddings 256)" in str(
        err.value
    )
    cfg(**{**ONE, "teacher_pretrain": "tiny-demo", "max_prompt_len": 200, "generate_max_len": 56}).validate()


def test_a_teacher_with_another_tokenizer_is_refused_before_start_up_with_the_reason():
    """tiny-code's tokenizer was trained on other text than tiny's: same size, other ids."""
    problems = teacher_tokenizer_problems(cfg(teacher_pretrain="tiny-code"))
    assert len(problems) == 1
    (problem,) = problems
    assert problem.startswith("teacher_pretrain='tiny-code' does not share the tokenizer of pretrain='tiny'")
    assert "tokens have another id (e.g." in problem and "use a teacher of the same model family" in problem
    with pytest.raises(ConfigError, match="does not share the tokenizer"):
        short = {"max_prompt_len": 128, "generate_max_len": 64}  # within tiny-code's 256 positions
        validate_run(cfg(**{**ONE, **short}, teacher_pretrain="tiny-code", train_data=["gsm8k_test"], eval_data=[]))


def test_a_teacher_with_the_same_tokenizer_passes_the_run_checks():
    """tiny-demo is another model (4 layers, 256 context) built on tiny's tokenizer."""
    assert teacher_tokenizer_problems(cfg(teacher_pretrain="tiny-demo")) == []
    assert teacher_tokenizer_problems(cfg(teacher_pretrain="tiny")) == []
    assert teacher_tokenizer_problems(cfg()) == []


@pytest.mark.parametrize(
    ("flags", "groups"),
    [
        ({}, ["policy", "ref", "teacher", "vllm"]),
        ({"colocate_policy_ref": True}, ["policy+ref+teacher", "vllm"]),
        ({"colocate_all": True}, ["policy+ref+teacher+vllm"]),
    ],
)
def test_the_teacher_is_placed_as_the_reference(flags, groups):
    base = dict(ONE, colocate_all=False, kl_mode="reward", init_kl_coef=0.01, teacher_pretrain="tiny-demo")
    base["reference_process"] = "own"  # the reference as a role of its own (on CPU, auto puts it in the policy)
    requests = cfg(**{**base, **flags}).placement_requests(device="cpu")
    assert [r.name for r in requests] == groups
    without_kl = cfg(**{**base, "kl_mode": "none", "init_kl_coef": 0.0})  # no reference: the teacher keeps its shape
    assert [r.name for r in without_kl.placement_requests(device="cpu")] == ["policy", "teacher", "vllm"]
    assert without_kl.role_resources()["teacher"] == without_kl.role_resources()["policy"]


def test_the_memory_model_counts_the_teacher_as_a_second_frozen_model():
    base = dict(pretrain="Qwen/Qwen2.5-7B", advantage_estimator="grpo", kl_mode="reward", init_kl_coef=0.01)
    plain, distil = setup_from_config(cfg(**base)), setup_from_config(cfg(teacher_pretrain="x", **base))
    assert plain.teacher_dp == 0 and distil.teacher_dp == distil.ref_dp == 8
    p, d = mm.colocated_phase_bytes(plain), mm.colocated_phase_bytes(distil)
    params = mm.param_bytes(distil, 8, role="teacher")
    for phase in p:
        assert d[phase]["policy_params"] == p[phase]["policy_params"] + params


def test_the_teacher_worker_is_a_frozen_reference_loading_the_teacher():
    c = cfg(teacher_pretrain="tiny-demo", **ONE)
    teacher, ref = worker_config(c, "teacher"), worker_config(c, "ref")
    assert teacher.model_path == c.model_source("tiny-demo") != ref.model_path
    assert teacher.zero_stage == ref.zero_stage and teacher.offload_params == ref.offload_params

"""``sequence_parallel_size`` refused before anything starts (``reasonrl.config.sequence_parallel``): a size that
does not divide a model's query or key/value heads (read from its config.json) or a role's ranks, a vision-language
model and LoRA adapters, each naming the field; a size that fits is accepted (the workers run it:
tests/distributed/test_distributed_sp_workers.py)."""

from __future__ import annotations

import json

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.sequence_parallel import model_problems, sequence_parallel_problems
from reasonrl.models import tiny_model_path

CPU = dict(device="cpu", bf16=False, generate_max_len=256, vllm_num_engines=1, colocate_all=False)


def cfg(**kw) -> BasePPOExpConfig:
    return BasePPOExpConfig(**{"pretrain": str(tiny_model_path()), "advantage_estimator": "grpo", **kw})


def test_size_one_is_the_default_and_has_no_problem():
    assert cfg().sequence_parallel_size == 1
    assert sequence_parallel_problems(cfg()) == []


def test_a_size_that_divides_heads_and_ranks_is_accepted():
    # the tiny model has 4 query and 2 key/value heads; 4 policy ranks, 2 reference ranks
    problems = sequence_parallel_problems(
        cfg(sequence_parallel_size=2, policy_devices_per_node=4, kl_mode="k3", ref_devices_per_node=2)
    )
    assert problems == []


def test_lora_is_refused_naming_both_fields():
    problems = sequence_parallel_problems(cfg(sequence_parallel_size=2, policy_devices_per_node=2, lora_rank=8))
    assert problems == [
        "sequence_parallel_size=2: LoRA adapters (lora_rank=8) are not served by sequence parallelism yet: set "
        "lora_rank=0 or sequence_parallel_size=1"
    ]


def test_heads_ranks_and_range_are_refused_naming_the_field():
    problems = sequence_parallel_problems(cfg(sequence_parallel_size=4, policy_devices_per_node=6))
    assert any("must divide pretrain's num_key_value_heads=2" in p for p in problems), problems
    assert any("must divide the policy ranks (policy_num_nodes x policy_devices_per_node = 6)" in p for p in problems)
    assert all(p.startswith("sequence_parallel_size=4") for p in problems)
    critic = sequence_parallel_problems(
        cfg(sequence_parallel_size=2, advantage_estimator="gae", policy_devices_per_node=2, critic_devices_per_node=3)
    )
    assert any("the critic ranks" in p for p in critic), critic
    assert sequence_parallel_problems(cfg(sequence_parallel_size=0)) == [
        "sequence_parallel_size=0: must be >= 1 (1 = each sequence on one rank)"
    ]


def test_vision_language_model_refused_and_unknown_model_not_guessed(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"vision_config": {}, "text_config": {"num_attention_heads": 8}}))
    assert "vision-language model" in model_problems(2, "pretrain", str(tmp_path))[0]
    assert model_problems(2, "pretrain", "tiny") == []  # an offline name: checked by the worker that loads it


def test_validate_accepts_a_size_that_fits_and_refuses_one_that_does_not():
    cfg(sequence_parallel_size=2, policy_devices_per_node=2, **CPU).validate()
    with pytest.raises(ConfigError) as err:
        cfg(sequence_parallel_size=2, policy_devices_per_node=3, **CPU).validate()
    assert "sequence_parallel_size=2 must divide the policy ranks" in str(err.value)

"""The resume comparison (``reasonrl.config.resume``): which fields of a checkpoint's config.json may differ from
the new config, and the error that lists the others with both values and the ways out."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.resume import (
    ALWAYS_ALLOWED,
    RUN_LENGTH_FIELDS,
    check_resume_config,
    config_changes,
    field_defaults,
    read_saved_config,
    removed_fields,
    resume_changes,
)

GOOD = dict(pretrain="tiny", device="cpu", generate_max_len=512)


def good(**overrides) -> BasePPOExpConfig:
    return BasePPOExpConfig(**{**GOOD, **overrides})


# ------------------------------------------------------------------------------------------ config_changes
def test_config_changes_lists_each_differing_field_with_both_values_in_field_order():
    saved = {"a": 1, "b": [1, 2], "c": "x", "d": 0.5}
    current = {"a": 2, "b": (1, 2), "c": "y", "d": 0.5}
    changes = config_changes(saved, current)
    assert [(c.name, c.saved, c.current) for c in changes] == [("a", 1, 2), ("c", "x", "y")]
    assert changes[0].describe() == "a: checkpoint 1, this run 2"
    assert config_changes(saved, current, ignore=["a", "c"]) == []


def test_config_changes_compares_json_forms_nan_and_ints_with_floats():
    nan = float("nan")
    assert config_changes({"x": nan, "y": 5, "z": {"k": [1]}}, {"x": nan, "y": 5.0, "z": {"k": (1,)}}) == []
    assert [c.name for c in config_changes({"x": nan}, {"x": 1.0})] == ["x"]


def test_missing_key_of_an_old_checkpoint_is_compared_with_the_default():
    defaults = {"new_field": 3}
    assert config_changes({}, {"new_field": 3}, defaults=defaults) == []
    (change,) = config_changes({}, {"new_field": 5}, defaults=defaults)
    assert change.absent and change.saved == 3 and change.current == 5
    assert change.describe() == "new_field: checkpoint not recorded (default 3), this run 5"
    (change,) = config_changes({}, {"other": 1})  # no default known: a change
    assert change.absent and "no default" in change.describe()


def test_keys_the_config_no_longer_has_are_reported_apart_not_refused():
    saved = {"_class": "x.Y", "gone": 1, "a": 1}
    assert config_changes(saved, {"a": 1}) == []
    assert removed_fields(saved, {"a": 1}) == ["gone"]


def test_field_defaults_are_the_subclass_defaults_in_json_form():
    @dataclass
    class Recipe(BasePPOExpConfig):
        actor_lr: float = 3e-6
        stop: list[str] = dataclasses.field(default_factory=lambda: ["</answer>"])

    defaults = field_defaults(Recipe)
    assert defaults["actor_lr"] == 3e-6 and defaults["stop"] == ["</answer>"] and defaults["resume_allow_changes"] == []
    assert set(defaults) == {f.name for f in dataclasses.fields(Recipe)}


# ------------------------------------------------------------------------------------------ resume_changes
def test_always_allowed_and_run_length_names_are_config_fields():
    names = {f.name for f in dataclasses.fields(BasePPOExpConfig)}
    assert set(ALWAYS_ALLOWED) <= names and set(RUN_LENGTH_FIELDS) <= names
    # what makes a resume wrong is never waved through
    for name in ("pretrain", "advantage_estimator", "actor_lr", "seed", "train_data", "zero_stage", "bf16"):
        assert name not in ALWAYS_ALLOWED
    assert not {"rollout_batch_size", "policy_devices_per_node", "generate_max_len", "lr_schedule"} & set(
        ALWAYS_ALLOWED
    )


def test_resume_refuses_computing_fields_and_allows_bookkeeping_ones():
    saved = good(max_steps=10).to_dict()
    new = good(
        max_steps=20,  # extended run, constant LR: allowed
        log_interval=5,
        save_interval=7,
        eval_interval=3,
        max_tokens_per_micro_batch=4096,
        exp_name="fork",
        actor_lr=2e-6,
        pretrain="smollm2",
        seed=7,
    )
    assert [c.name for c in resume_changes(saved, new)] == ["seed", "pretrain", "actor_lr"]
    assert resume_changes(saved, dataclasses.replace(new, resume_allow_changes=["seed", "pretrain", "actor_lr"])) == []


def test_run_length_must_be_named_when_the_lr_decays_over_it():
    saved = good(lr_schedule="cosine", max_steps=10).to_dict()
    (change,) = resume_changes(saved, good(lr_schedule="cosine", max_steps=20))
    assert change.name == "max_steps" and "LR would jump" in change.describe()
    assert resume_changes(saved, good(lr_schedule="cosine", max_steps=20, resume_allow_changes=["max_steps"])) == []
    # a constant schedule in the checkpoint but a decaying one now: both fields are named
    changed = resume_changes(good(max_steps=10).to_dict(), good(lr_schedule="linear", max_steps=20))
    assert [c.name for c in changed] == ["lr_schedule", "max_steps"]


def test_staged_recipe_allows_named_changes():
    saved = good(generate_max_len=512, max_steps=100).to_dict()
    stage2 = good(generate_max_len=1024, max_steps=200, vllm_max_model_len=None)
    assert [c.name for c in resume_changes(saved, stage2)] == ["generate_max_len"]
    assert resume_changes(saved, dataclasses.replace(stage2, resume_allow_changes=["generate_max_len"])) == []


# ------------------------------------------------------------------------------------------ check_resume_config
def test_check_resume_config_error_names_file_fields_values_and_fixes(tmp_path):
    good(actor_lr=1e-6, generate_max_len=512).save_json(tmp_path)
    with pytest.raises(ConfigError) as err:
        check_resume_config(good(actor_lr=2e-6, generate_max_len=1024), tmp_path)
    text = str(err.value)
    assert f"{tmp_path / 'config.json'} was written by a different config" in text
    assert "generate_max_len: checkpoint 512, this run 1024" in text
    assert "actor_lr: checkpoint 1e-06, this run 2e-06" in text
    assert "resume_allow_changes=generate_max_len,actor_lr" in text and "resume=none" in text
    assert (
        check_resume_config(
            good(actor_lr=2e-6, generate_max_len=1024, resume_allow_changes=["actor_lr", "generate_max_len"]), tmp_path
        )
        == []
    )


def test_check_resume_config_returns_removed_keys_and_tolerates_new_fields(tmp_path):
    data = good().to_dict()
    data.pop("resume_allow_changes")  # a checkpoint older than the field
    data.pop("sync_bucket_mb")
    data["retired_knob"] = 1
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert check_resume_config(good(), tmp_path) == ["retired_knob"]


@pytest.mark.parametrize(
    "content, pattern",
    [(None, r"config.json is missing"), ("{not json", r"config.json is unreadable"), ("[1]", r"not a JSON object")],
)
def test_unreadable_saved_config_is_refused_with_the_file_name(tmp_path, content, pattern):
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(ConfigError, match=pattern) as err:
        read_saved_config(tmp_path)
    assert "resume=none" in str(err.value)


# ------------------------------------------------------------------------------------------ the field itself
def test_resume_allow_changes_parses_and_validates_names():
    cfg = good().with_overrides({"resume_allow_changes": "generate_max_len,max_steps"})
    assert cfg.resume_allow_changes == ["generate_max_len", "max_steps"]
    cfg.validate()
    with pytest.raises(
        ConfigError,
        match=r"resume_allow_changes: 'generate_max_lne' is not a config field.*"
        r"did you mean 'generate_max_len'",
    ):
        good(resume_allow_changes=["generate_max_lne"]).validate()

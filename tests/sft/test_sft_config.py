"""SFTConfig validation: every bad field is named with its fix, all at once, before anything heavy is imported;
the command line refuses bad configs with exit status 2 before Ray starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from reasonrl.config import ConfigError
from reasonrl.sft import SFTConfig

GOOD = dict(pretrain="tiny", train_data=["arith_add2_train"], output_dir="does/not/exist/yet")


def problems(**fields) -> list[str]:
    try:
        SFTConfig(**(GOOD | fields)).validate()
    except ConfigError as err:
        return err.problems
    return []


def test_a_good_config_validates():
    assert problems() == []
    assert (
        problems(
            pretrain="arith-sft", rows=[{"question": "1+1=", "answer": "2"}], max_prompt_len=32, max_response_len=16
        )
        == []
    )


@pytest.mark.parametrize(
    "fields, pattern",
    [
        (dict(lr=0.0), r"lr=0.0 must be > 0"),
        (dict(train_batch_size=0), r"train_batch_size=0 must be >= 1"),
        (dict(max_steps=0), r"max_steps=0 must be >= 1"),
        (dict(eval_frac=1.0), r"eval_frac=1.0 must be in \[0, 1\)"),
        (dict(lr_schedule="cosin"), r"lr_schedule='cosin' is not one of .*did you mean 'cosine'"),
        (dict(zero_stage=4), r"zero_stage=4 is not one of"),
        (dict(prompt_template="nope"), r"prompt_template='nope' is neither"),
        (dict(pretrain="models/missing"), r"pretrain='models/missing' does not exist"),
        (dict(train_data=[]), r"train_data is empty: give at least one built-in dataset"),
        (dict(train_data=["gsm8k_trian"]), r"train_data: 'gsm8k_trian' is neither .*did you mean 'gsm8k_train'"),
        (dict(eval_data=["x.jsonl"]), r"eval_data: 'x.jsonl' is neither"),
        (dict(warmup_steps=-1), r"warmup_steps=-1 must be >= 0"),
        (dict(save_interval=-2), r"save_interval=-2 must be >= 0"),
        (dict(keep_last_ckpts=0), r"keep_last_ckpts=0 must be >= 1"),
        (dict(torch_threads=0), r"torch_threads=0 must be >= 1"),
        (dict(offload_optimizer=True, zero_stage=0), r"offload_optimizer=true needs zero_stage 1, 2 or 3"),
        (dict(tracker="wandbb"), r"tracker='wandbb' is not one of .*did you mean 'wandb'"),
        (dict(pretrain="tiny-demo"), r"max_prompt_len \+ max_response_len = 512 exceeds the 256-token context"),
        (dict(output_dir="ckpt/sft"), r"output_dir='ckpt/sft' overlaps the checkpoint folder"),
        (dict(output_dir="logs/sft_model"), r"output_dir='logs/sft_model' overlaps log_dir"),
        (dict(band_low=0.5), r"band_low and band_high go together"),
        (dict(band_low=0.7, band_high=0.6, band_data="arith_add2_val"), r"need 0 <= low < high <= 1"),
        (dict(band_low=0.5, band_high=0.6), r"band_data is empty"),
        (dict(band_low=0.5, band_high=0.6, band_data="arith_add2_train"), r"band_data='arith_add2_train' is also"),
        (dict(band_low=0.5, band_high=0.6, band_data="v", band_metric="f1"), r"band_metric='f1' is not one of"),
        (dict(band_low=0.5, band_high=0.6, band_data="v", band_eval_interval=0), r"band_eval_interval=0 must be"),
        (dict(band_low=0.5, band_high=0.6, band_data="v", prompt_template="chat"), r"a band needs prompt_template"),
    ],
)
def test_each_bad_field_is_named(fields, pattern):
    import re

    found = problems(**fields)
    assert len(found) == 1 and re.search(pattern, found[0]), found


def test_all_problems_are_reported_together():
    assert len(problems(lr=-1.0, train_batch_size=0, zero_stage=7)) == 3


def test_existing_output_dir_is_refused_unless_overwrite(tmp_path):
    assert problems(output_dir=str(tmp_path)) == [
        f"output_dir={str(tmp_path)!r} already exists: choose another folder or pass overwrite=true (the old folder "
        "is replaced only after the new export is complete)"
    ]
    assert problems(output_dir=str(tmp_path), overwrite=True) == []
    (tmp_path / "notes.txt").write_text("not a model")
    assert "is a non-empty folder that is not a model export" in problems(output_dir=str(tmp_path), overwrite=True)[0]
    (tmp_path / "config.json").write_text("{}")
    assert problems(output_dir=str(tmp_path), overwrite=True) == []


def test_command_line_overrides_and_help():
    cfg = SFTConfig.from_cli(["lr=3e-4", "--max-steps=7", "train_data=gsm8k_train,math_train"])
    assert (cfg.lr, cfg.max_steps, cfg.train_data) == (3e-4, 7, ["gsm8k_train", "math_train"])
    with pytest.raises(ConfigError, match=r"unknown field 'lrr'.*did you mean 'lr'"):
        SFTConfig.from_cli(["lrr=1"])
    assert "  train_batch_size: int = 64" in SFTConfig.help_text() and "  generator:" not in SFTConfig.help_text()


def test_bad_recipe_fails_from_the_command_line_before_ray(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "playground.sft_arith", "lr=-1", f"output_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 2
    assert "invalid SFT config: 2 problems" in proc.stderr and "lr=-1.0 must be > 0" in proc.stderr
    assert "output_dir=" in proc.stderr and "Started a local Ray instance" not in proc.stderr + proc.stdout


def test_help_lists_every_field_with_type_default_and_meaning():
    """``python -m reasonrl.sft --help``: the RL recipes' layout ("name: type = default", then its meaning), by
    group, from SFTConfig's field metadata; in-memory data is left out."""
    import dataclasses

    from reasonrl.sft.config import PYTHON_ONLY_FIELDS

    text = SFTConfig.help_text()
    lines = text.splitlines()
    assert "[optimisation]" in lines and "[data]" in lines and "[resources]" in lines
    for f in dataclasses.fields(SFTConfig):
        heads = [i for i, line in enumerate(lines) if line.startswith(f"  {f.name}: ")]
        if f.name in PYTHON_ONLY_FIELDS:
            assert not heads, f"{f.name} is Python only"
            continue
        assert len(heads) == 1, f"{f.name} missing from --help"
        assert f.metadata.get("help"), f"{f.name} has no help text"
        assert lines[heads[0] + 1] == f"      {f.metadata['help']}"
    assert "  lr: float = 1e-05" in lines and "  max_steps: int | None = None" in lines
    proc = subprocess.run([sys.executable, "-m", "reasonrl.sft", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "  train_batch_size: int = 64" in proc.stdout and "config=" in proc.stdout


def test_default_lr_suits_llms_and_the_demo_recipe_keeps_its_own():
    """SFTConfig's lr suits full fine-tuning of real LLMs; the 5M-parameter demo model's recipes keep 1e-3, so the
    cached ``arith-sft`` warm start (whose key hashes the lr) and the demo's result do not change."""
    from playground.sft_arith import SFTArithConfig
    from reasonrl.sft.warm_start import ArithWarmStartConfig

    assert SFTConfig().lr == 1e-5
    assert ArithWarmStartConfig().lr == SFTArithConfig().lr == 1e-3
    assert ArithWarmStartConfig().weights_fingerprint()["lr"] == 1e-3

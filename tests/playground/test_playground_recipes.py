"""Every recipe is a config subclass; GPU recipes whose model is missing fail at once, before Ray starts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import playground
from playground import recipe_config, rl_recipe_names
from reasonrl.config import OFFLINE_MODELS, ConfigError

RECIPES = rl_recipe_names()


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_validates_or_names_the_missing_model(name):
    cfg = recipe_config(name)()
    if cfg.pretrain in OFFLINE_MODELS:  # built, converted or trained on first use: valid without a folder
        cfg.validate()
        cfg.apply_debug_mode().validate()
    else:
        with pytest.raises(ConfigError, match=r"pretrain=.*not in the local HF cache.*hf download"):
            cfg.validate()


def test_debug_mode_qwen7b_ppo_on_the_tiny_model_runs_a_few_short_steps():
    """``DEBUG_MODE=1 python -m playground.qwen7b_ppo pretrain=tiny``, as resolved (not run): one device, a few
    steps of short prompts and responses, valid on this machine; overrides after the shrink still win."""
    cls = recipe_config("qwen7b_ppo")
    cfg = cls.from_cli(["pretrain=tiny", "device=cpu"], environ={"DEBUG_MODE": "1"})
    assert cfg.debug and cfg.exp_name == "qwen7b_ppo-debug" and cfg.policy_world_size == cfg.critic_world_size == 1
    assert cfg.max_steps == 3 and cfg.max_prompt_len <= 512 and cfg.generate_max_len <= 256
    assert cfg.resolved_vllm_max_model_len <= 2048  # fits the tiny model's context
    cfg.validate()
    longer = cls.from_cli(["pretrain=tiny", "device=cpu", "max_steps=10"], environ={"DEBUG_MODE": "1"})
    assert longer.max_steps == 10 and longer.debug


def test_recipes_only_override_fields():
    """No copied code: a recipe module defines one config class (and nothing but field defaults in it)."""
    for name in RECIPES:
        cls = recipe_config(name)
        own = {k for k in vars(cls) if not k.startswith("__")}
        fields = set(cls.__dataclass_fields__)
        assert own <= fields, f"{name}: {sorted(own - fields)} are not field overrides"


def test_missing_model_fails_fast_from_the_command_line():
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "playground.qwen7b_ppo", "exp_name=x"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(playground.__file__).parent.parent,
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode != 0
    assert "hf download Qwen/Qwen2.5-7B" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr + proc.stdout
    print(f"qwen7b_ppo without its model failed in {elapsed:.1f}s")

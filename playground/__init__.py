"""Experiment recipes: each file subclasses a config and only overrides fields.

Run one with ``python -m playground.<recipe> [field=value ...]``; ``DEBUG_MODE=1`` shrinks it to one device.
``python -m playground memory --recipe <recipe>`` (or ``--all``: every GPU recipe) prints the memory model's tables
of docs/memory.md.
"""

from __future__ import annotations

import importlib
import pkgutil

# The recipes sized for 80 GB GPUs: their memory tables are docs/memory.md's (tests/config/test_config_memory.py).
GPU_RECIPES = (
    "qwen0p5b_ppo_1gpu",
    "qwen1p5b_ppo",
    "qwen7b_ppo",
    "qwen7b_grpo",
    "qwen7b_dapo",
    "qwen32b_ppo",
    "skywork_code_grpo",
    "skywork_code_grpo_32k",
    "qwen7b_grpo_16k",
    "qwen7b_grpo_lora",
    "qwen32b_grpo_lora",
)


def rl_recipe_names() -> list[str]:
    """Module names of the RL recipes (``sft_*`` modules are SFT recipes; sub-packages such as ``agents`` hold the
    programs recipes run, not recipes)."""
    modules = pkgutil.iter_modules(__path__)
    return sorted(m.name for m in modules if not m.ispkg and not m.name.startswith(("sft_", "_")))


def recipe_config(name: str) -> type:
    """The config class a recipe module defines (the subclass of ``BasePPOExpConfig`` declared in it)."""
    from reasonrl.config import BasePPOExpConfig

    module = importlib.import_module(f"{__name__}.{name}")
    classes = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, BasePPOExpConfig)]
    return next(c for c in classes if c.__module__ == module.__name__)


def memory_table(name: str) -> str:
    """The memory model's phase table of recipe ``name`` (its default config), as docs/memory.md prints it."""
    from reasonrl.config.memory import setup_from_config
    from reasonrl.planning.memory_model import format_table

    return format_table(name, setup_from_config(recipe_config(name)()))

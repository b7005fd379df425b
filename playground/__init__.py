"""Experiment recipes: each file subclasses a config and only overrides fields.

Run one with ``python -m playground.<recipe> [field=value ...]``; ``DEBUG_MODE=1`` shrinks it to one device.
"""

from __future__ import annotations

import importlib
import pkgutil


def rl_recipe_names() -> list[str]:
    """Module names of the RL recipes (``sft_*`` modules are SFT recipes)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith(("sft_", "_")))


def recipe_config(name: str) -> type:
    """The config class a recipe module defines (the subclass of ``BasePPOExpConfig`` declared in it)."""
    from reasonrl.config import BasePPOExpConfig

    module = importlib.import_module(f"{__name__}.{name}")
    classes = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, BasePPOExpConfig)]
    return next(c for c in classes if c.__module__ == module.__name__)

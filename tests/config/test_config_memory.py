"""The memory model of a config (``reasonrl.config.memory``): a recipe's setup, the GPU recipes' fit on an 80 GB
device, their tables (``python -m playground memory``) and docs/memory.md."""

from __future__ import annotations

import pytest

from playground import GPU_RECIPES, memory_table, recipe_config
from playground.__main__ import main
from reasonrl.config.memory import setup_from_config
from reasonrl.planning import memory_model as mm

GB = mm.GB


@pytest.mark.parametrize("recipe", GPU_RECIPES)
def test_every_gpu_recipe_fits_an_80gb_device_in_every_phase(recipe):
    s = setup_from_config(recipe_config(recipe)())
    for row, parts in mm.step_table(s).items():
        total = sum(parts.values())
        assert total + mm._headroom(row) <= 80 * GB, f"{recipe} {row}: {total / GB:.1f} GB"
    assert mm.fits(s)
    if s.colocate_all:
        assert s.vllm_gpu_memory_utilization <= mm.max_colocated_utilization(s)


def test_unknown_model_is_a_clear_error():
    cfg = recipe_config("qwen7b_ppo")()
    cfg.pretrain = "some/unknown-model"
    with pytest.raises(KeyError, match="some/unknown-model"):
        setup_from_config(cfg)


def test_cli_prints_a_recipe_table(capsys):
    assert main(["memory", "--recipe", "qwen7b_ppo"]) == 0
    out = capsys.readouterr().out
    assert "| training |" in out and "fits" in out


def test_docs_memory_md_holds_the_current_tables():
    """docs/memory.md prints the model's output; regenerate: ``python -m playground memory --all``."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "memory.md").read_text(encoding="utf-8")
    for name in GPU_RECIPES:
        assert memory_table(name) in doc, name

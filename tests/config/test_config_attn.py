"""``attn_implementation=auto`` resolution (issue 13 item 7): flash-attn 2 only with bf16 on GPU."""

from __future__ import annotations

import importlib.util

import pytest

from reasonrl.config import BasePPOExpConfig


@pytest.fixture
def flash_attn_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "flash_attn" else real(name, *a)
    )


@pytest.mark.parametrize(
    ("bf16", "device", "expected"),
    [(True, "gpu", "flash_attention_2"), (False, "gpu", "sdpa"), (True, "cpu", "sdpa"), (False, "cpu", "sdpa")],
)
def test_auto_picks_flash_attention_only_for_bf16_on_gpu(flash_attn_installed, bf16, device, expected):
    cfg = BasePPOExpConfig(pretrain="tiny", bf16=bf16)
    assert cfg.resolved_attn_implementation(device) == expected


def test_explicit_choice_is_kept():
    assert (
        BasePPOExpConfig(pretrain="tiny", bf16=False, attn_implementation="eager").resolved_attn_implementation("gpu")
        == "eager"
    )

"""Memory model: hand-checked sizes, and the formulas move the way ZeRO, offload and checkpointing say they should
(a config's setup and the GPU recipes: tests/config/test_config_memory.py)."""

from __future__ import annotations

import dataclasses

import pytest

from reasonrl.distributed import memory_model as mm
from reasonrl.distributed.phases import COLOCATED_STEP, Phase

GB = mm.GB


@pytest.mark.parametrize(
    ("name", "billions"),
    [("Qwen/Qwen2.5-0.5B", 0.49), ("Qwen/Qwen2.5-1.5B", 1.54), ("Qwen/Qwen2.5-7B", 7.62)],
)
def test_parameter_counts_match_the_model_cards(name, billions):
    assert mm.QWEN25[name].num_params / 1e9 == pytest.approx(billions, abs=0.01)


def test_hand_checked_7b_numbers():
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-7B"], policy_dp=32)
    assert mm.vllm_weight_bytes(s) / GB == pytest.approx(15.23, abs=0.01)  # 2 bytes x 7.615e9
    assert mm.param_bytes(s, 32) / GB == pytest.approx(15.23 / 32, abs=0.01)  # ZeRO-3 partition
    # fp32 grads (4) + fp32 master (4) + Adam m, v (8) = 16 bytes per parameter, over 32 ranks
    assert mm.train_state_bytes(s, 32) / GB == pytest.approx(16 * 7.615 / 32, abs=0.01)
    # logits of a 16384-token micro-batch: 16384 x 152064 x (2 + 8) bytes
    assert mm.activation_bytes(s, trains=True, logits=True) > 16384 * 152064 * 10


def test_zero_offload_and_checkpointing_move_the_numbers_the_right_way():
    base = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-7B"], policy_dp=8)
    assert mm.param_bytes(dataclasses.replace(base, zero_stage=2), 8) == 8 * mm.param_bytes(base, 8)
    assert mm.train_state_bytes(dataclasses.replace(base, optimizer_offload=True), 8) < mm.train_state_bytes(base, 8)
    no_ckpt = dataclasses.replace(base, gradient_checkpointing=False)
    assert mm.activation_bytes(no_ckpt, trains=True, logits=False) > 5 * mm.activation_bytes(
        base, trains=True, logits=False
    )


def test_colocated_phases_follow_the_state_machine():
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-7B"], policy_dp=32, critic_dp=32)
    table = mm.colocated_phase_bytes(s)
    assert list(table) == list(dict.fromkeys(COLOCATED_STEP))
    assert "train_states" in table[Phase.TRAINING] and "vllm_weights" not in table[Phase.TRAINING]
    assert table[Phase.SYNC]["vllm_weights"] == mm.vllm_weight_bytes(s)
    assert sum(table[Phase.GENERATION].values()) == pytest.approx(
        0.85 * 80 * GB + table[Phase.GENERATION]["policy_params"]
    )


def test_a_recipe_that_does_not_fit_is_reported():
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-32B"], policy_dp=1, gradient_checkpointing=False)
    assert not mm.fits(s)
    assert "DOES NOT FIT" in mm.format_table("too_big", s)

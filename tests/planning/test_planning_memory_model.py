"""Memory model: hand-checked sizes, and the formulas move the way ZeRO, offload and checkpointing say they should
(a config's setup and the GPU recipes: tests/config/test_config_memory.py)."""

from __future__ import annotations

import dataclasses

import pytest

from reasonrl.planning import memory_model as mm
from reasonrl.planning.device_phases import COLOCATED_STEP, Phase

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
    generation = table[Phase.GENERATION]
    assert sum(generation.values()) == pytest.approx(
        0.85 * 80 * GB + generation["policy_params"] + generation["cuda_contexts"]
    )


def test_cuda_contexts_are_counted_per_process_in_every_phase():
    """Colocated: one rank of each role + the engine's actor, + vLLM's worker outside GENERATION (inside the budget
    while it generates); 0.5 GB each. Split placement: one per role device, none on vLLM-only devices."""
    assert mm.CUDA_CONTEXT_BYTES == GB // 2
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-7B"], policy_dp=8, critic_dp=8, ref_dp=8)
    table = mm.colocated_phase_bytes(s)
    assert table[Phase.GENERATION]["cuda_contexts"] == 4 * mm.CUDA_CONTEXT_BYTES  # policy, critic, ref, engine actor
    assert table[Phase.TRAINING]["cuda_contexts"] == 5 * mm.CUDA_CONTEXT_BYTES  # + vLLM's sleeping worker
    assert table[Phase.SYNC]["cuda_contexts"] == 5 * mm.CUDA_CONTEXT_BYTES
    split = mm.split_device_bytes(dataclasses.replace(s, colocate_all=False))
    assert split["policy"]["cuda_contexts"] == mm.CUDA_CONTEXT_BYTES and "cuda_contexts" not in split["vllm"]
    assert mm.vllm_engine_bytes(s) == mm.vllm_budget_bytes(s) + mm.CUDA_CONTEXT_BYTES


def test_the_cuda_graph_pool_wakes_with_the_weights_in_sync_only():
    """vLLM's graph pool is inside its budget while generating, backed up while asleep, and back beside the weights
    at the SYNC wake (tags=["weights"] wakes every non-deferrable tag too)."""
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-7B"], policy_dp=8)
    table = mm.colocated_phase_bytes(s)
    assert table[Phase.SYNC]["vllm_cuda_graphs"] == mm.VLLM_CUDA_GRAPH_BYTES == 3 * GB
    assert "vllm_cuda_graphs" not in table[Phase.GENERATION] and "vllm_cuda_graphs" not in table[Phase.TRAINING]
    eager = mm.colocated_phase_bytes(dataclasses.replace(s, vllm_cuda_graph_bytes=0))
    assert sum(table[Phase.SYNC].values()) - sum(eager[Phase.SYNC].values()) == 3 * GB


def test_the_contexts_lower_the_largest_colocated_utilization():
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-7B"], policy_dp=8, critic_dp=8)
    resident = mm.colocated_phase_bytes(s)[Phase.GENERATION]["policy_params"]
    without_contexts = (s.device_bytes - mm.HEADROOM - resident) / s.device_bytes
    assert mm.max_colocated_utilization(s) == pytest.approx(
        without_contexts - 3 * mm.CUDA_CONTEXT_BYTES / s.device_bytes
    )


def test_a_recipe_that_does_not_fit_is_reported():
    s = mm.Setup(model=mm.QWEN25["Qwen/Qwen2.5-32B"], policy_dp=1, gradient_checkpointing=False)
    assert not mm.fits(s)
    assert "DOES NOT FIT" in mm.format_table("too_big", s)


def test_lora_counts_the_adapters_peft_adds_and_trains_only_those():
    """``lora_params`` against PEFT on a meta Qwen2 of 7B's layer shape (2 layers, all-linear, rank 32), and the
    policy's training states shrink to the adapters' while the critic's do not."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from reasonrl.models.lora import LoraSettings, add_adapters

    shape = mm.QWEN25["Qwen/Qwen2.5-7B"]
    two_layers = dataclasses.replace(shape, num_hidden_layers=2)
    config = Qwen2Config(
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        vocab_size=shape.vocab_size,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = add_adapters(AutoModelForCausalLM.from_config(config), LoraSettings(rank=32, alpha=64))
    peft_count = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad)
    assert two_layers.lora_params(32) == peft_count
    assert shape.lora_params(32) / shape.num_params == pytest.approx(0.0106, abs=1e-4)  # ~1% of 7B at rank 32

    full = mm.Setup(model=shape, policy_dp=8, critic_dp=8)
    lora = dataclasses.replace(full, lora_rank=32)
    assert mm.train_state_bytes(lora, 8, lora=True) == 16 * shape.lora_params(32) // 8
    assert mm.train_state_bytes(lora, 8) == mm.train_state_bytes(full, 8)  # the critic trains every weight
    assert mm.split_device_bytes(lora)["policy"]["train_states"] < mm.split_device_bytes(full)["policy"]["train_states"]

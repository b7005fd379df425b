"""Cross-field rules of ``reasonrl.config.consistency``: critic settings under a critic-free estimator."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError


@dataclass
class _PPORecipe(BasePPOExpConfig):
    pretrain: str | None = "tiny"
    device: str = "cpu"
    generate_max_len: int = 512
    critic_lr: float = 1e-5
    critic_update_steps: int | None = 32


@dataclass
class _GRPOFromPPORecipe(_PPORecipe):
    advantage_estimator: str = "grpo"
    n_samples_per_prompt: int = 8
    critic_num_nodes: int = 0


def test_critic_settings_a_grpo_recipe_inherits_pass_and_added_ones_fail():
    """A GRPO recipe derived from a PPO recipe keeps its parent's critic settings (also shrunk by DEBUG_MODE);
    the same settings given on top of it (command line, with_overrides) would be ignored, so they are refused."""
    _GRPOFromPPORecipe().validate()
    _GRPOFromPPORecipe.from_cli([], environ={"DEBUG_MODE": "1"}).validate()  # critic_update_steps 32 -> 16
    with pytest.raises(ConfigError, match=r"critic_update_steps=4: only advantage_estimator='gae'"):
        _GRPOFromPPORecipe.from_cli(["critic_update_steps=4"], environ={}).validate()
    with pytest.raises(ConfigError, match=r"critic_lr=2e-05: .*recipe _GRPOFromPPORecipe declares itself"):
        _GRPOFromPPORecipe().with_overrides({"critic_lr": "2e-5"}).validate()
    _PPORecipe().with_overrides({"critic_lr": "2e-5"}).validate()  # gae: the critic uses it


def test_every_critic_only_field_is_refused_when_added():
    from reasonrl.config.consistency import CRITIC_ONLY_FIELDS

    values = {
        "critic_pretrain": "tiny",
        "critic_lr": "3e-6",
        "critic_epochs": "2",
        "critic_train_batch_size": "64",
        "critic_update_steps": "2",
        "value_clip": "none",
        "lam": "0.95",
    }
    assert set(values) == set(CRITIC_ONLY_FIELDS)
    for name, value in values.items():
        with pytest.raises(ConfigError) as info:
            _GRPOFromPPORecipe().with_overrides({name: value}).validate()
        assert f"{name}=" in str(info.value) and "silently ignored" in str(info.value), (name, str(info.value))


def test_colocate_all_on_gpu_needs_sleep_and_a_utilisation_that_leaves_room():
    """On GPU, colocate_all without vLLM sleep is refused, and so is a utilisation above the memory model's limit;
    on CPU (sleep is a no-op, no device memory budget) neither applies."""
    import dataclasses

    from playground import recipe_config
    from reasonrl.config.consistency import _check_colocation

    gpus = {"GPU": 32.0}
    cfg = recipe_config("qwen7b_ppo")()
    assert _check_colocation(cfg, gpus) == []
    no_sleep = dataclasses.replace(cfg, vllm_enable_sleep=False)
    (problem,) = _check_colocation(no_sleep, gpus)
    assert "vllm_enable_sleep=false on GPU" in problem and "set vllm_enable_sleep=true" in problem
    greedy = dataclasses.replace(cfg, vllm_gpu_memory_utilization=0.95)
    (problem,) = _check_colocation(greedy, gpus)
    assert "vllm_gpu_memory_utilization=0.95" in problem and "<= 0.88" in problem  # 0.89 before the CUDA contexts
    assert _check_colocation(dataclasses.replace(no_sleep, device="cpu"), gpus) == []
    assert _check_colocation(dataclasses.replace(greedy, device="auto"), {"CPU": 8.0}) == []
    split = recipe_config("qwen32b_ppo")()  # vLLM on its own devices, never asleep: fine
    assert _check_colocation(split, {"GPU": 128.0}) == []


def test_broadcast_sync_under_colocate_all_on_gpu_is_refused_naming_the_field():
    """NCCL refuses a group with two ranks on one GPU: policy rank 0 and the engine worker it shares a GPU with
    (issue 39 item 8). Refused by validate() before Ray; auto/ipc pass; on CPU (gloo) and under split placement
    broadcast is fine."""
    import dataclasses

    from playground import recipe_config
    from reasonrl.config import ConfigError
    from reasonrl.config.consistency import _check_sync_transport

    gpus = {"GPU": 32.0}
    cfg = recipe_config("qwen7b_ppo")()
    broadcast = dataclasses.replace(cfg, sync_transport="broadcast")
    (problem,) = _check_sync_transport(broadcast, gpus)
    assert problem.startswith("sync_transport=broadcast with colocate_all=true on GPU") and "NCCL" in problem
    assert (
        _check_sync_transport(cfg, gpus) == []
        and _check_sync_transport(dataclasses.replace(cfg, sync_transport="ipc"), gpus) == []
    )
    assert _check_sync_transport(dataclasses.replace(broadcast, device="cpu"), gpus) == []
    assert _check_sync_transport(dataclasses.replace(broadcast, device="auto"), {"CPU": 8.0}) == []
    split = dataclasses.replace(recipe_config("qwen32b_ppo")(), sync_transport="broadcast")
    assert _check_sync_transport(split, {"GPU": 128.0}) == []
    with pytest.raises(ConfigError, match="sync_transport=broadcast with colocate_all"):  # listed with the others
        broadcast.validate(gpus)


def test_lora_fields_their_ranges_and_the_reference_they_need_not_place():
    """With LoRA the reference is the policy's adapter switched off: a KL term needs no reference nodes and none is
    placed. Dropout is refused in RL (it would skew the PPO ratio); the adapter-only sync needs adapters."""
    base = dict(pretrain="tiny", device="cpu", generate_max_len=512, kl_mode="loss", init_kl_coef=1e-3)
    lora = BasePPOExpConfig(**base, lora_rank=8, ref_num_nodes=0)
    lora.validate()
    assert lora.reference_in_policy and lora.role_resources()["ref"].num_nodes == 0
    with pytest.raises(ConfigError, match="needs a reference model but ref_num_nodes=0"):
        BasePPOExpConfig(**base, ref_num_nodes=0).validate()
    bad = BasePPOExpConfig(**base, lora_rank=8, lora_dropout=0.05, lora_alpha=0, lora_target_modules=[])
    with pytest.raises(ConfigError) as err:
        bad.validate()
    for expected in ("lora_dropout=0.05: must be 0 in RL", "lora_alpha=0", "lora_target_modules=[]"):
        assert expected in str(err.value), (expected, str(err.value))
    with pytest.raises(ConfigError, match="lora_sync='adapter': adapter needs LoRA adapters"):
        BasePPOExpConfig(**base, lora_sync="adapter").validate()

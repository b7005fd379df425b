"""The ORZ recipes are Open-Reasoner-Zero's runs, field by field.

Every value below was read in Open-Reasoner-Zero/Open-Reasoner-Zero at commit 3fdd9a0: the run's playground script
(``playground/orz_*.py``), the defaults it inherits (``orz/exps/examples/ppo/ppo_base_exp.py``) and what the fields
do (``orz/ppo/trainer.py``, ``orz/ppo/actors.py``, ``orz/ppo/utils.py``). The comment of each entry names the ORZ
field. Where ORZ's value cannot be expressed, ``DIFFERS`` holds both values and the recipe's docstring says why.
"""

from __future__ import annotations

import inspect
import json
import math
import sys

import pytest

from playground import recipe_config
from reasonrl.config import BasePPOExpConfig

# ------------------------------------------------------------------------------------------ orz_7b_ppo.py
ORZ_7B_PPO = {
    # resources: total_num_nodes=32 "nodes" x 1 GPU each (actor/ref/critic_num_gpus_per_node=1)
    "policy_world_size": 32,  # actor_num_nodes=32 x actor_num_gpus_per_node=1
    "critic_world_size": 32,  # critic_num_nodes=32 x critic_num_gpus_per_node=1
    "vllm_num_engines": 32,  # vllm_num_engines=total_num_nodes
    "vllm_tensor_parallel_size": 1,  # vllm_tensor_parallel_size=1
    "colocate_all": True,  # colocate_all=True
    "colocate_policy_ref": True,  # colocate_actor_ref=True
    "colocate_critic_reward": True,  # colocate_critic_reward=True
    "zero_stage": 3,  # zero_stage=3
    "bf16": True,  # bf16=True (base)
    "gradient_checkpointing": True,  # gradient_checkpointing=True (base)
    "optimizer_offload": False,  # adam_offload=False
    "vllm_gpu_memory_utilization": 0.7,  # gpu_memory_utilization = 0.7 (use_grpo=False, not DEBUG_MODE)
    "vllm_enable_sleep": True,  # colocate_all: vLLM engines are offloaded while models train
    "packing_samples": True,  # ORZ always packs (trainer: "only support packed sequences")
    "max_tokens_per_micro_batch": 16384,  # packing_max_len=16384 with micro_train/forward_batch_size=1
    "reward_num_nodes": 0,  # reward_pretrain=None: no reward model
    "seed": 42,  # seed=42 (base)
    # models
    "pretrain": "Qwen/Qwen2.5-7B",  # pretrain
    "critic_pretrain": None,  # critic_pretrain = pretrain (None here = same as pretrain)
    "reward_pretrain": None,  # reward_pretrain=None
    # data and rollout
    "prompt_template": "orz",  # zero_setting_base.py CustomDataset: R1-Zero <think>/<answer> template
    "extract_mode": "orz",  # generate_vllm: r"<answer>.*?(\\boxed{.*}).*?</answer>", last match, else ""
    "max_prompt_len": 2048,  # prompt_max_len=2048
    "rollout_batch_size": 128,  # rollout_batch_size=128
    "n_samples_per_prompt": 64,  # n_samples_per_prompt=64
    "generate_max_len": 8000,  # generate_max_len=8000 (SamplingParams max_tokens)
    "temperature": 1.0,  # temperature=1.0
    "top_p": 1.0,  # top_p=1.0
    "top_k": -1,  # top_k=-1
    "stop": ["User:", "Human:", "Assistant:", "</answer>"],  # stop
    "include_stop_str_in_output": True,  # SamplingParams(include_stop_str_in_output=True)
    # reward (custom_reward_fn): 1.0 iff stop_reason == "stop" and correct, else 0.0; no format reward
    "correct_reward": 1.0,
    "wrong_reward": 0.0,
    "require_stop": True,
    "format_reward": 0.0,
    "overlong_buffer_len": 0,
    "dynamic_sampling": False,
    # algorithm
    "advantage_estimator": "gae",  # critic_pretrain set (use_grpo=False): GAE with a critic
    "gamma": 1.0,  # gamma=1.0
    "lam": 1.0,  # lambd=1.0
    "whiten_advantages": True,  # advantage_normalize=True
    "policy_loss": "ppo",  # PolicyLoss: clipped surrogate
    "clip_eps_low": 0.2,  # eps_clip=0.2 (base)
    "clip_eps_high": 0.2,  # eps_clip=0.2 (base)
    "dual_clip_c": None,  # PolicyLoss has no dual clip
    "value_clip": 0.2,  # value_clip=0.2 (base)
    "agg_mode": "token-mean",  # packed rows carry action_mask=None: masked_mean(loss, None, -1) = token mean
    "kl_mode": "none",  # init_kl_coef=0 and use_kl_loss=True with kl_loss_coef=0.0
    "init_kl_coef": 0.0,  # init_kl_coef=0, kl_loss_coef=0.0
    "entropy_coef": 0.0,  # no entropy term in the loss (entropy is only logged)
    # optimisation
    "actor_lr": 1e-6,  # actor_learning_rate=1e-6
    "critic_lr": 5e-6,  # critic_learning_rate=5e-6
    "lr_warmup_steps": 50,  # num_warmup_steps=50 (each model's own optimizer steps)
    "lr_schedule": "constant",  # get_scheduler("constant_with_warmup")
    "weight_decay": 0.0,  # l2=0.0 (base)
    "grad_clip": 1.0,  # max_norm=1.0 (base): DeepSpeed gradient_clipping
    "policy_epochs": 1,  # max_epochs=1 (base)
    "critic_epochs": 1,  # max_epochs=1 (base)
    "policy_update_steps": 1,  # policy_update_steps=1: optimizer steps in one pass
    "critic_update_steps": 12,  # critic_update_steps=12: optimizer steps in one pass
    "train_batch_size": None,  # ORZ's train_batch_size=256 only sizes its step count, not the mini-batches
    "critic_train_batch_size": None,
    "num_episodes": 20,  # num_episodes=20
    "max_steps": None,  # ORZ runs all episodes
    # evaluation and checkpoints
    "eval_interval": 10,  # enable_eval=True, eval_interval=10
    "eval_before_training": True,  # eval when global_step % eval_interval == 0, step 0 included
    "eval_n_samples": 1,  # eval(): one sample per prompt
    "eval_temperature": 1.0,  # eval(): SamplingParams(temperature=cfg.temperature)
    "save_interval": 50,  # save_interval=50
}

# orz_1p5b_ppo.py: every training field of orz_7b_ppo.py except these.
ORZ_1P5B_PPO = {
    **ORZ_7B_PPO,
    "pretrain": "Qwen/Qwen2.5-1.5B",  # pretrain
    "policy_world_size": 16,  # total_num_nodes=16 x 1 GPU
    "critic_world_size": 16,  # total_num_nodes=16 x 1 GPU
    "vllm_num_engines": 16,  # vllm_num_engines=total_num_nodes
    "max_tokens_per_micro_batch": 10048,  # packing_max_len = generate_max_len + prompt_max_len
}

# orz_0p5b_ppo_1gpu.py: every training field of orz_7b_ppo.py except these.
ORZ_0P5B_PPO_1GPU = {
    **ORZ_7B_PPO,
    "pretrain": "Qwen/Qwen2.5-0.5B",  # pretrain
    "policy_world_size": 1,  # total_num_nodes=1 x 1 GPU
    "critic_world_size": 1,  # total_num_nodes=1 x 1 GPU
    "vllm_num_engines": 1,  # vllm_num_engines=total_num_nodes
    "vllm_gpu_memory_utilization": 0.75,  # gpu_memory_utilization=0.75
    "max_tokens_per_micro_batch": 10048,  # packing_max_len = generate_max_len + prompt_max_len
}

# orz_32b_ppo.py: every training field of orz_7b_ppo.py except these.
ORZ_32B_PPO = {
    **ORZ_7B_PPO,
    "pretrain": "Qwen/Qwen2.5-32B",  # pretrain
    "colocate_all": False,  # colocate_all=False
    "policy_world_size": 32,  # train_num_nodes_per_group=32 x 1 GPU (actor, colocated with ref)
    "critic_world_size": 32,  # train_num_nodes_per_group=32 x 1 GPU (critic, colocated with the reward slot)
    "vllm_num_engines": 16,  # vllm_num_engines=16
    "vllm_tensor_parallel_size": 4,  # vllm_tensor_parallel_size=4
    "vllm_gpu_memory_utilization": 0.95,  # gpu_memory_utilization=0.95
    "vllm_enable_sleep": False,  # not colocate_all: vLLM engines stay loaded
    "max_tokens_per_micro_batch": 10048,  # packing_max_len = generate_max_len + prompt_max_len
}

# orz_7b_grpo.py: orz_7b_ppo.py with use_grpo=True.
ORZ_7B_GRPO = {
    **ORZ_7B_PPO,
    "advantage_estimator": "grpo",  # use_grpo=True: score - mean of the prompt's samples, no critic
    "grpo_norm_by_std": False,  # `if std := np.std(...) > 0` binds std=True: scores are divided by 1
    "critic_world_size": None,  # critic_pretrain = "" if use_grpo: no critic
    "vllm_gpu_memory_utilization": 0.75,  # gpu_memory_utilization = 0.75 if not DEBUG_MODE
}

ORZ_TABLES = {
    "qwen7b_ppo": ("playground/orz_7b_ppo.py", ORZ_7B_PPO),
    "qwen1p5b_ppo": ("playground/orz_1p5b_ppo.py", ORZ_1P5B_PPO),
    "qwen0p5b_ppo_1gpu": ("playground/orz_0p5b_ppo_1gpu.py", ORZ_0P5B_PPO_1GPU),
    "qwen32b_ppo": ("playground/orz_32b_ppo.py", ORZ_32B_PPO),
    "qwen7b_grpo": ("playground/orz_7b_grpo.py", ORZ_7B_GRPO),
}

# Total GPUs of each ORZ run (README launch commands; the scripts' group sizes).
ORZ_TOTAL_GPUS = {
    "qwen7b_ppo": 32,  # 4 nodes x 8
    "qwen1p5b_ppo": 16,  # 2 nodes x 8
    "qwen0p5b_ppo_1gpu": 1,
    "qwen32b_ppo": 128,  # 16 nodes x 8: 32 actor(+ref) + 32 critic(+reward) + 16 engines x tp 4
    "qwen7b_grpo": 32,
}

# field: (ORZ's value, the recipe's value); each is named in qwen7b_ppo's "Differs from ORZ" with its reason.
DIFFERS = {
    "vllm_max_model_len": (8192, None),  # max_len=8192; validation needs max_prompt_len + generate_max_len
    "train_data": (["data/orz_math_57k_collected.json"], ["math_train", "gsm8k_train"]),  # prompt_data
    "eval_data": (
        ["data/eval_data/math500.json", "data/eval_data/aime2024.json", "data/eval_data/gpqa_diamond.json"],
        ["math500_test"],
    ),  # eval_prompt_data
}

SAMPLES_PER_STEP = 128 * 64


def resolved(name: str) -> BasePPOExpConfig:
    return recipe_config(name)()


def field_value(cfg: BasePPOExpConfig, key: str):
    if key == "critic_world_size":
        return cfg.critic_world_size if cfg.use_critic else None
    return getattr(cfg, key)


def recipe_doc(name: str) -> str:
    return inspect.getdoc(sys.modules[recipe_config(name).__module__]) or ""


@pytest.mark.parametrize("name", sorted(ORZ_TABLES))
def test_recipe_resolves_to_orz_values(name):
    _, table = ORZ_TABLES[name]
    cfg = resolved(name)
    wrong = {key: (field_value(cfg, key), orz) for key, orz in table.items() if field_value(cfg, key) != orz}
    assert not wrong, f"{name}: fields that differ from ORZ as (recipe, ORZ): {wrong}"


@pytest.mark.parametrize("name", sorted(ORZ_TABLES))
def test_one_policy_step_and_twelve_critic_steps_in_one_pass(name):
    cfg = resolved(name)
    assert cfg.rollout_samples_per_step == SAMPLES_PER_STEP
    assert cfg.policy_optimizer_steps_per_rollout == 1  # strictly on-policy
    assert cfg.mini_batch_bounds("policy") == [(0, SAMPLES_PER_STEP)]
    if not cfg.use_critic:
        return
    bounds = cfg.mini_batch_bounds("critic")
    assert cfg.critic_optimizer_steps_per_rollout == 12  # 12 steps, not 12 epochs (12 x the compute)
    assert cfg.critic_epochs == 1 and len(bounds) == 12
    assert bounds[0][0] == 0 and bounds[-1][1] == SAMPLES_PER_STEP
    assert all(hi == lo for (_, hi), (lo, _) in zip(bounds[:-1], bounds[1:], strict=True))  # one pass, each sample once
    assert {hi - lo for lo, hi in bounds} <= {SAMPLES_PER_STEP // 12, SAMPLES_PER_STEP // 12 + 1}


@pytest.mark.parametrize("name", sorted(ORZ_TABLES))
def test_workers_warm_up_for_fifty_of_their_own_optimizer_steps(name, tiny_model_dir):
    from reasonrl.run.role_settings import worker_config

    cfg = resolved(name).with_overrides({"pretrain": str(tiny_model_dir)})  # a local model: worker configs resolve it
    policy = worker_config(cfg, "policy", num_rollout_steps=100)
    assert (policy.lr, policy.warmup_steps, policy.total_steps) == (1e-6, 50, 100)
    assert (policy.weight_decay, policy.grad_clip, policy.lr_schedule) == (0.0, 1.0, "constant")
    assert math.ceil(policy.warmup_steps / cfg.policy_optimizer_steps_per_rollout) == 50  # rollouts to full LR
    if cfg.use_critic:
        critic = worker_config(cfg, "critic", num_rollout_steps=100)
        assert (critic.lr, critic.warmup_steps, critic.total_steps) == (5e-6, 50, 1200)
        assert math.ceil(critic.warmup_steps / cfg.critic_optimizer_steps_per_rollout) == 5  # ORZ: ~4 rollouts


def test_adamw_is_orz_adamw():
    """ORZ: FusedAdam(betas=adam_betas=(0.9, 0.95), weight_decay=l2=0.0) with its default eps 1e-8."""
    from reasonrl.distributed.deepspeed_engine import make_optimizer

    params = inspect.signature(make_optimizer).parameters
    assert params["betas"].default == (0.9, 0.95)
    assert params["eps"].default == 1e-8
    assert params["weight_decay"].default == 0.0


@pytest.mark.parametrize("name", sorted(ORZ_TABLES))
def test_placement_uses_orz_gpu_count(name):
    cfg = resolved(name)
    groups = cfg.placement_requests(device="gpu")
    assert sum(g.num_bundles * g.bundle["GPU"] for g in groups) == ORZ_TOTAL_GPUS[name]


@pytest.mark.parametrize("name", sorted(ORZ_TABLES))
def test_recipe_validates_with_its_model(name, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 32768}))
    (model / "tokenizer.json").write_text("{}")  # validate() reads only which tokenizer files exist
    cfg = resolved(name).with_overrides({"pretrain": str(model), "ray_address": "auto"})
    cfg.validate()
    cfg.apply_debug_mode().validate()


@pytest.mark.parametrize("name", sorted(ORZ_TABLES))
def test_docstring_names_the_source_and_the_differences(name):
    path, _ = ORZ_TABLES[name]
    doc = recipe_doc(name)
    for needle in ("Open-Reasoner-Zero/Open-Reasoner-Zero", path, "3fdd9a0", "Differs from ORZ"):
        assert needle in doc, f"{name}: docstring does not name {needle!r}"


@pytest.mark.parametrize("key", sorted(DIFFERS))
def test_known_differences_are_documented(key):
    orz, ours = DIFFERS[key]
    assert orz != ours
    for name in ORZ_TABLES:
        assert field_value(resolved(name), key) == ours
    differs = recipe_doc("qwen7b_ppo").split("Differs from ORZ:")[1]
    assert f"- {key}:" in differs


def test_dapo_keeps_its_own_algorithm_over_the_orz_base():
    """qwen7b_dapo reuses the 7B setup, not ORZ's GRPO quirks, and does not claim to reproduce the DAPO run."""
    cfg = resolved("qwen7b_dapo")
    assert (cfg.advantage_estimator, cfg.grpo_norm_by_std, cfg.whiten_advantages) == ("grpo", True, False)
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.agg_mode) == (0.2, 0.28, "token-mean")
    assert (cfg.dynamic_sampling, cfg.overlong_buffer_len, cfg.kl_mode) == (True, 1024, "none")
    assert "Not a reproduction" in recipe_doc("qwen7b_dapo")

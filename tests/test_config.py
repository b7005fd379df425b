"""BasePPOExpConfig: validation messages (fast, before Ray), overrides, JSON, table, debug mode, subclassing."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import reasonrl.config as config_mod
from reasonrl.config import BasePPOExpConfig, ConfigError, debug_mode_requested, parse_overrides
from reasonrl.run.checks import validate_run

REPO = Path(__file__).resolve().parents[1]

# A valid CPU config: the tiny offline model (2048-token context), default ORZ-like resources on CPU devices.
GOOD = dict(pretrain="tiny", device="cpu", generate_max_len=512)


def good(**overrides) -> BasePPOExpConfig:
    return BasePPOExpConfig(**{**GOOD, **overrides})


def a_file(root: Path) -> Path:
    path = root / "a_file"
    path.write_text("not a folder\n")
    return path


def model_dir(root: Path, name: str = "model", **config) -> Path:
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen2", **config}))
    (path / "tokenizer.json").write_text("{}")  # validate() reads only which tokenizer files exist
    return path


# ------------------------------------------------------------------------------------------------- good configs
def test_good_configs_validate():
    good().validate()
    good(advantage_estimator="grpo", n_samples_per_prompt=8, critic_num_nodes=0).validate()
    good(kl_mode="loss", init_kl_coef=1e-3, kl_estimator="low_var_kl+").validate()
    good(kl_mode="reward", init_kl_coef=0.05, kl_controller="adaptive", kl_target=0.1).validate()
    good(train_batch_size=512, critic_train_batch_size=256, policy_epochs=2).validate()
    good(policy_update_steps=12, critic_update_steps=12).validate()  # ORZ: nearly equal parts
    good(advantage_estimator="remax", critic_num_nodes=0).validate()  # greedy baseline rollout in the loop
    good(
        colocate_all=False,
        colocate_policy_ref=True,
        policy_devices_per_node=4,
        ref_devices_per_node=4,
        vllm_num_engines=2,
        vllm_tensor_parallel_size=2,
        kl_mode="loss",
        init_kl_coef=1e-3,
    ).validate(cluster_resources={"CPU": 16.0})  # 16 CPU bundles: more than a local Ray on a small machine has
    good(pretrain="smollm2", generate_max_len=4096).validate()
    good(dual_clip_c=3.0, clip_eps_high=0.28, dynamic_sampling=True, overlong_buffer_len=128).validate()
    good(agent_fn="reasonrl/agents/agent_fn.py:load_agent_fn", agent_reward="verifier", agent_concurrency=8).validate()
    split = {"cluster_resources": {"CPU": 64.0}}  # split placement: a bundle per role and engine
    good(
        fully_async=True, async_staleness=4, colocate_all=False, rollout_correction="token_tis", dynamic_sampling=True
    ).validate(**split)
    good(
        fully_async=True,
        async_staleness=2,
        colocate_all=False,
        rollout_correction="token_tis",
        partial_rollout="recompute",
    ).validate(**split)


def test_good_config_with_model_folder_and_cluster(tmp_path):
    path = model_dir(tmp_path, max_position_embeddings=4096)
    cfg = good(pretrain=str(path), generate_max_len=3000)
    cfg.validate(cluster_resources={"CPU": 16.0}, nodes=None)
    cfg.validate(nodes=[{"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 8.0}}])


# ------------------------------------------------------------------------------------------------- bad configs
# (id, overrides (or a function of tmp_path returning them), regex the message must match, fields it must name;
# an empty list means: every overridden field)
BAD_CONFIGS = [
    ("no-pretrain", dict(pretrain=None), r"pretrain is not set.*pretrain=tiny.*hf download", ["pretrain"]),
    ("missing-path", dict(pretrain="/no/such/model"), r"does not exist.*pretrain=/path/to/hf_folder", ["pretrain"]),
    ("hub-id-not-cached", dict(pretrain="SomeOrg/NotCached-7B"), r"Hugging Face Hub id.*local HF cache", ["pretrain"]),
    ("folder-no-config", lambda tmp: dict(pretrain=str(tmp)), r"folder without config\.json", ["pretrain"]),
    ("critic-path", dict(critic_pretrain="/no/critic"), r"critic_pretrain='/no/critic' does not exist", []),
    ("reward-no-nodes", dict(reward_pretrain="tiny"), r"reward_num_nodes=0: set reward_num_nodes >= 1", []),
    ("reward-nodes-no-model", dict(reward_num_nodes=1), r"reward_pretrain is not set", ["reward_num_nodes"]),
    ("train-data", dict(train_data=["nope_set"]), r"train_data: 'nope_set' is neither a built-in", []),
    ("eval-data-typo", dict(eval_data=["gsm8k_tset"]), r"did you mean 'gsm8k_test'", ["eval_data"]),
    ("empty-train", dict(train_data=[]), r"train_data is empty", []),
    ("rollout-correction", dict(rollout_correction="tis"), r"rollout_correction='tis' is unknown", []),
    ("async-negative", dict(async_staleness=-1), r"async_staleness=-1: must be >= 0", []),
    ("async-colocated", dict(async_staleness=1), r"async_staleness=1 with colocate_all=true.*colocate_all=false", []),
    ("correction-cap", dict(rollout_correction_cap=0.5), r"rollout_correction_cap=0.5: must be >= 1", []),
    (
        "async-two-ahead",
        dict(async_staleness=2, colocate_all=False),
        r"async_staleness=2: .*cannot receive new weights while it generates.*async_staleness=1",
        ["async_staleness"],
    ),
    (
        "ipc-split",
        dict(sync_transport="ipc", colocate_all=False),
        r"sync_transport='ipc' .*needs colocate_all=true",
        [],
    ),
    (
        "async-dynamic-sampling",
        dict(async_staleness=1, colocate_all=False, dynamic_sampling=True, advantage_estimator="grpo"),
        r"async_staleness=1 with dynamic_sampling refills.*use async_staleness=0",
        ["async_staleness", "dynamic_sampling"],
    ),
    (
        "fully-async-no-staleness",
        dict(fully_async=True, colocate_all=False, rollout_correction="token_tis"),
        r"fully_async=true needs async_staleness >= 1",
        ["fully_async"],
    ),
    (
        "fully-async-colocated",
        dict(fully_async=True, async_staleness=2, rollout_correction="token_tis"),
        r"fully_async=true with colocate_all=true.*set colocate_all=false",
        ["fully_async"],
    ),
    (
        "fully-async-no-logprobs",
        dict(fully_async=True, async_staleness=2, colocate_all=False),
        r"fully_async=true needs the engines' per-token log-probs.*set rollout_correction=token_tis",
        ["fully_async"],
    ),
    (
        "fully-async-mode",
        dict(
            fully_async=True,
            async_staleness=2,
            colocate_all=False,
            rollout_correction="token_tis",
            partial_rollout="drop",
        ),
        r"partial_rollout='drop': must be one of \['keep', 'recompute'\]",
        ["partial_rollout"],
    ),
    (
        "fully-async-multi-turn",
        dict(fully_async=True, async_staleness=2, colocate_all=False, rollout_correction="token_tis", env_fn="tools"),
        r"fully_async=true does not support env_fn yet \(multi-turn.*set fully_async=false",
        ["fully_async"],
    ),
    (
        "agent-fn-missing-file",
        dict(agent_fn="no/such_agent.py:run"),
        r"agent_fn='no/such_agent.py:run': file 'no/such_agent.py' does not exist",
        ["agent_fn"],
    ),
    (
        "agent-fn-names-a-class",
        dict(agent_fn="reasonrl/agents/tool_env.py:ToolEnvironment"),
        r"ToolEnvironment is a class; agent_fn must name a function run\(row, endpoint\)",
        ["agent_fn"],
    ),
    (
        "agent-fn-no-such-function",
        dict(agent_fn="reasonrl/agents/agent_fn.py:runn"),
        r"defines no 'runn'.*the part after ':' must name a function defined there",
        ["agent_fn"],
    ),
    (
        "agent-fn-and-env-fn",
        dict(agent_fn="reasonrl/agents/agent_fn.py:load_agent_fn", env_fn="tools"),
        r"agent_fn=.* and env_fn='tools' both set.*set one of them to none",
        ["agent_fn", "env_fn"],
    ),
    (
        "agent-fn-remax",
        dict(agent_fn="reasonrl/agents/agent_fn.py:load_agent_fn", advantage_estimator="remax", critic_num_nodes=0),
        r"agent_fn with advantage_estimator='remax': its greedy baseline would run every agent program a second",
        ["agent_fn", "remax"],
    ),
    (
        "agent-fn-fully-async",
        dict(
            agent_fn="reasonrl/agents/agent_fn.py:load_agent_fn",
            fully_async=True,
            async_staleness=2,
            colocate_all=False,
            rollout_correction="token_tis",
        ),
        r"fully_async=true does not support agent_fn yet \(agent sessions use the engines' turn pump",
        ["fully_async", "agent_fn"],
    ),
    (
        "agent-settings",
        dict(agent_concurrency=0, agent_timeout_s=0.0, agent_reward="judge"),
        r"agent_concurrency.*must be >= 1.*agent_timeout_s.*must be > 0.*agent_reward.*\['agent', 'verifier', 'both'\]",
        ["agent_concurrency", "agent_timeout_s", "agent_reward"],
    ),
    (
        "fully-async-remax",
        dict(
            fully_async=True,
            async_staleness=2,
            colocate_all=False,
            rollout_correction="token_tis",
            advantage_estimator="remax",
        ),
        r"fully_async=true does not support advantage_estimator=remax yet",
        ["fully_async"],
    ),
    ("correction-bounds", dict(rollout_correction_upper=0.5), r"rollout_correction_upper=0.5: must be >= 1", []),
    (
        "correction-top-p",
        dict(rollout_correction="token_tis", top_p=0.9),
        r"renormalised over the top-p/top-k tokens.*set top_p=1.0 and top_k=0",
        [],
    ),
    (
        "estimator",
        dict(advantage_estimator="grpoo"),
        r"'grpoo' is unknown.*did you mean 'grpo'",
        ["advantage_estimator"],
    ),
    ("policy-loss", dict(policy_loss="ppo2"), r"policy_loss='ppo2' is unknown; valid: ppo, gspo", []),
    ("agg-mode", dict(agg_mode="token_mean"), r"did you mean 'token-mean'", ["agg_mode"]),
    ("kl-estimator", dict(kl_estimator="k4"), r"kl_estimator='k4' is unknown", []),
    ("kl-controller", dict(kl_controller="pid"), r"kl_controller='pid' is unknown; valid: fixed, adaptive", []),
    ("lr-schedule", dict(lr_schedule="exp"), r"lr_schedule='exp' is unknown; valid: constant, linear, cosine", []),
    ("template", dict(prompt_template="orzz"), r"neither a built-in template.*did you mean 'orz'", ["prompt_template"]),
    ("device", dict(device="tpu"), r"device='tpu' is unknown; valid: auto, cpu, gpu", []),
    ("resume", dict(resume="/no/ckpt/step_3"), r"resume=auto.*resume=none", ["resume"]),
    ("zero-stage", dict(zero_stage=4), r"zero_stage=4 is unknown", []),
    ("flash-on-cpu", dict(attn_implementation="flash_attention_2"), r"needs a GPU", ["attn_implementation"]),
    (
        "flash-in-fp32",
        dict(attn_implementation="flash_attention_2", bf16=False),
        r"runs in bf16/fp16 only.*bf16=true",
        ["attn_implementation"],
    ),
    ("temperature", dict(temperature=0.0), r"temperature=0\.0: must be > 0.*eval_temperature", []),
    ("top-p", dict(top_p=1.5), r"top_p=1\.5: must be in \(0, 1\]", []),
    ("clip-low", dict(clip_eps_low=0.0), r"clip_eps_low=0\.0: must be in \(0, 1\]", []),
    ("dual-clip", dict(dual_clip_c=0.5), r"dual_clip_c=0\.5: must be > 1", []),
    ("dual-clip-gspo", dict(dual_clip_c=3.0, policy_loss="gspo"), r"dual_clip_c=3\.0 applies to policy_loss='ppo'", []),
    ("lr", dict(actor_lr=0.0), r"actor_lr=0\.0: must be in \(0, 1\)", []),
    ("gamma", dict(gamma=1.5), r"gamma=1\.5: must be in \[0, 1\]", []),
    ("nan", dict(lam=float("nan")), r"lam=nan: must be in \[0, 1\]", []),
    ("grpo-one-sample", dict(advantage_estimator="grpo", n_samples_per_prompt=1), r"n_samples_per_prompt >= 2", []),
    ("dyn-sampling-one", dict(dynamic_sampling=True, n_samples_per_prompt=1), r"dynamic_sampling.*>= 2", []),
    (
        "steps-and-batch",
        dict(train_batch_size=512, policy_update_steps=2),
        r"train_batch_size=512 and policy_update_steps=2 both set",
        [],
    ),
    ("steps-below-world", dict(critic_update_steps=10**6), r"critic_update_steps=1000000 cuts .* smaller than", []),
    ("gae-no-critic", dict(critic_num_nodes=0), r"advantage_estimator='gae' trains a critic", ["critic_num_nodes"]),
    ("kl-no-coef", dict(kl_mode="loss"), r"kl_mode='loss' needs init_kl_coef > 0", []),
    (
        "kl-no-ref",
        dict(kl_mode="reward", init_kl_coef=0.01, ref_num_nodes=0),
        r"needs a reference model but ref_num_nodes=0",
        ["kl_mode", "ref_num_nodes"],
    ),
    ("kl-coef-no-mode", dict(init_kl_coef=0.01), r"no effect with kl_mode='none'", ["init_kl_coef"]),
    (
        "adaptive-kl-target",
        dict(kl_mode="loss", init_kl_coef=0.01, kl_controller="adaptive"),
        r"needs kl_target",
        ["kl_controller", "kl_target"],
    ),
    ("reinforce-off-policy", dict(policy_loss="reinforce", policy_epochs=2), r"on-policy", ["policy_loss"]),
    (
        "entropy-bounds",
        dict(adaptive_entropy=True, entropy_coef_min=0.01, entropy_coef_max=0.001),
        r"entropy_coef_min=0\.01 > entropy_coef_max=0\.001",
        ["entropy_coef_min", "entropy_coef_max"],
    ),
    ("eval-greedy-k", dict(eval_n_samples=4), r"identical samples.*eval_temperature > 0", ["eval_n_samples"]),
    (
        "batch-divide",
        dict(train_batch_size=300),
        r"train_batch_size=300 does not divide the 2048.*such as 128, 256, 512",
        [],
    ),
    ("batch-world", dict(train_batch_size=4), r"not divisible by the policy data-parallel world size 8", []),
    ("critic-world", dict(critic_train_batch_size=2), r"critic_train_batch_size=2 is not divisible.*critic", []),
    (
        "engines-split",
        dict(rollout_batch_size=3, n_samples_per_prompt=3),
        r"9 rollout samples.*vllm_num_engines=8",
        ["rollout_batch_size", "n_samples_per_prompt"],
    ),
    ("vllm-len", dict(vllm_max_model_len=1000), r"1536 tokens do not fit vllm_max_model_len=1000", []),
    (
        "model-context",
        dict(generate_max_len=4096),
        r"5120 tokens exceed the context of pretrain='tiny' \(max_position_embeddings 2048\).*generate_max_len <= 1024",
        [],
    ),
    (
        "folder-context",
        lambda tmp: dict(pretrain=str(model_dir(tmp, max_position_embeddings=1024))),
        r"exceed the context of pretrain=.*max_position_embeddings 1024\): lower max_prompt_len \(now 1024\)",
        ["generate_max_len", "max_prompt_len"],
    ),
    ("micro-batch", dict(max_tokens_per_micro_batch=1000), r"cannot hold one full sample.*>= 1536", []),
    ("overlong", dict(overlong_buffer_len=1000), r"overlong_buffer_len=1000 is longer than generate_max_len=512", []),
    ("colocate-engines", dict(vllm_num_engines=4), r"colocate_all: vllm.*num_engines = 8", []),
    (
        "colocate-sizes",
        dict(critic_devices_per_node=4),
        r"same num_nodes and devices_per_node.*critic_devices_per_node=4",
        ["colocate_all"],
    ),
    ("colocate-tp", dict(vllm_num_engines=2, vllm_tensor_parallel_size=3), r"tensor_parallel_size 3 must divide", []),
    (
        "cluster-too-small",
        "cluster",
        r"cannot be satisfied.*8 CPU requested, the cluster has 4",
        ["policy_devices_per_node", "vllm_num_engines"],
    ),
    ("gpus-too-few", "gpus", r"needs 8 GPUs.*has 2 visible.*DEBUG_MODE=1", ["device"]),
    ("reward-fn-form", dict(reward_fn="my_reward"), r"reward_fn='my_reward' needs the form file\.py:function", []),
    ("reward-fn-file", dict(reward_fn="no_such_file.py:score"), r"reward_fn=.*does not exist", []),
    ("reward-fn-module", dict(reward_fn="no_such_pkg_xyz.mod:score"), r"not importable", ["reward_fn"]),
    ("data-fields", dict(data_fields="orzz"), r"data_fields='orzz' is not a preset.*did you mean 'orz'", []),
    ("data-fields-keys", dict(data_fields={"prompt": "q"}), r"unknown key\(s\) \['prompt'\]", ["data_fields"]),
    ("exp-name", dict(exp_name="my run/1"), r"exp_name='my run/1' is used as a folder name", []),
    ("type-str-float", dict(actor_lr="1e-6"), r"actor_lr='1e-6': expected float, got str", []),
    ("type-bool-int", dict(seed=True), r"seed=True: expected int, got bool", []),
    ("type-list", dict(stop="</answer>"), r"stop='</answer>': expected list of str", []),
    ("seed-range", dict(seed=-5), r"seed=-5: must be in \[0, 4294967288\].*vllm_num_engines=8", []),
    ("seed-numpy", dict(seed=2**32), r"seed=4294967296: must be in \[0, 4294967288\]", []),
    ("ckpt-dir-file", lambda tmp: dict(ckpt_dir=str(a_file(tmp))), r"ckpt_dir=.*is a file, not a folder", []),
    ("log-dir-in-file", lambda tmp: dict(log_dir=f"{a_file(tmp)}/logs"), r"is a file, so .*cannot be created", []),
    (
        "grpo-critic-settings",
        dict(advantage_estimator="grpo", n_samples_per_prompt=8, critic_num_nodes=0, critic_lr=1e-5, value_clip=None),
        r"critic_lr=1e-05, value_clip=None: only advantage_estimator='gae' trains a critic.*silently ignored",
        ["critic_lr", "value_clip"],
    ),
    (
        "local-cpus",
        dict(cpus_per_bundle=1000.0),
        r"local Ray instance this run starts \(ray_address=none\) has \d+ logical CPUs.*8000 CPU requested",
        ["cpus_per_bundle"],
    ),
]


@pytest.mark.parametrize(("case", "overrides", "pattern", "names"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_rejected_fast_with_message(case, overrides, pattern, names, tmp_path, monkeypatch):
    validate_kwargs = {}
    if overrides == "cluster":
        overrides, validate_kwargs = {}, dict(cluster_resources={"CPU": 4.0, "memory": 1e9})
    elif overrides == "gpus":
        monkeypatch.setattr(config_mod, "_local_gpu_count", lambda: 2)
        overrides = dict(device="gpu")
    elif callable(overrides):
        overrides = overrides(tmp_path)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        validate_run(good(**overrides), **validate_kwargs)  # the config's checks and its data's, as a run
    elapsed = time.perf_counter() - start
    message = str(info.value)
    assert re.search(pattern, message, re.S), message
    for name in names or list(overrides):  # the message names the field(s) to change
        assert name in message, (name, message)
    assert elapsed < 2.0, f"validate took {elapsed:.2f}s"


def test_bad_config_table_is_big_enough():
    assert len(BAD_CONFIGS) >= 25


def test_all_problems_are_listed_at_once():
    cfg = good(pretrain=None, temperature=-1.0, advantage_estimator="grpoo", train_batch_size=300, top_p=0.0)
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    problems = info.value.problems
    assert len(problems) >= 5, problems
    text = str(info.value)
    assert text.startswith("invalid BasePPOExpConfig: ")
    for name in ("pretrain", "temperature", "advantage_estimator", "train_batch_size", "top_p"):
        assert name in text
    assert isinstance(info.value, ValueError)


def test_validate_before_ray_in_a_fresh_process():
    """Cold process: validate (good and bad) imports no ray / deepspeed / vllm (nor torch on CPU), in < 2 s."""
    code = textwrap.dedent(
        """
        import sys, time, json
        start = time.perf_counter()
        from reasonrl.config import BasePPOExpConfig, ConfigError
        BasePPOExpConfig(pretrain="tiny", device="cpu", generate_max_len=512).validate()
        try:
            BasePPOExpConfig(pretrain="/no/model", device="cpu", train_batch_size=3).validate()
        except ConfigError as exc:
            message = str(exc)
        elapsed = time.perf_counter() - start
        heavy = [m for m in ("ray", "deepspeed", "vllm", "torch", "transformers") if m in sys.modules]
        print(json.dumps({"elapsed": elapsed, "heavy": heavy, "message": message}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["heavy"] == [], result
    assert result["elapsed"] < 2.0, result
    assert "pretrain='/no/model' does not exist" in result["message"]


def test_import_reads_no_environment():
    """Defaults are constants: DEBUG_MODE at import time changes nothing."""
    code = "from reasonrl.config import BasePPOExpConfig as C; c = C(); print(c.debug, c.policy_devices_per_node)"
    env = {**os.environ, "DEBUG_MODE": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert out.stdout.split() == ["False", "8"], out.stderr


# ------------------------------------------------------------------------------------------------- registries
def test_known_names_equal_the_registries():
    from reasonrl import algos
    from reasonrl.data import ORZ_STOP, get_template
    from reasonrl.distributed.optim_setup import SCHEDULES
    from reasonrl.distributed.weight_sync import TRANSPORTS, VERIFY_SOURCES

    assert set(config_mod.SYNC_TRANSPORTS) == {"auto", *TRANSPORTS}
    assert set(config_mod.SYNC_VERIFY_SOURCES) == {"auto", *VERIFY_SOURCES}
    assert set(config_mod.ADVANTAGE_ESTIMATOR_NAMES) == set(algos.ADVANTAGE_ESTIMATORS)
    assert set(config_mod.POLICY_LOSS_NAMES) == set(algos.POLICY_LOSSES)
    assert set(config_mod.ROLLOUT_CORRECTIONS) == {"off", "monitor"} | set(algos.ROLLOUT_CORRECTION_MODES) - {"none"}
    assert tuple(config_mod.AGG_MODE_NAMES) == tuple(algos.AGG_MODES)
    assert set(config_mod.KL_ESTIMATOR_NAMES) == set(algos.kl_estimator_names())
    assert set(config_mod.LR_SCHEDULES) == set(SCHEDULES)
    assert tuple(config_mod.ORZ_STOP_STRINGS) == tuple(ORZ_STOP)
    for kind in config_mod.KL_CONTROLLERS:
        algos.get_kl_controller(kind, 0.1, target_kl=0.1, horizon=100)
    for name in config_mod.PROMPT_TEMPLATES:
        if name != "chat":  # needs a tokenizer
            get_template(name)
    for name in config_mod.GROUP_ESTIMATORS:
        assert name in algos.ADVANTAGE_ESTIMATORS


# ------------------------------------------------------------------------------------------------- overrides
def test_parse_overrides():
    argv = ["actor_lr=1e-6", "--seed=3", "--train-batch-size=64", "stop=", 'data_fields={"question": "q=x"}']
    assert parse_overrides(argv) == {
        "actor_lr": "1e-6",
        "seed": "3",
        "train_batch_size": "64",
        "stop": "",
        "data_fields": '{"question": "q=x"}',
    }
    assert parse_overrides(["seed=1", "seed=2"]) == {"seed": "2"}
    with pytest.raises(ConfigError, match=r"'actor_lr' is not a field=value override"):
        parse_overrides(["actor_lr"])
    with pytest.raises(ConfigError, match="not a field=value"):
        parse_overrides(["=3"])


@pytest.mark.parametrize(
    ("key", "text", "expected"),
    [
        ("bf16", "false", False),
        ("bf16", "True", True),
        ("bf16", "0", False),
        ("bf16", "yes", True),
        ("bf16", "OFF", False),
        ("seed", "7", 7),
        ("seed", "1_000", 1000),
        ("max_tokens_per_micro_batch", "1e4", 10000),
        ("actor_lr", "1e-6", 1e-6),
        ("actor_lr", "3", 3.0),
        ("cpus_per_bundle", "0.5", 0.5),
        ("exp_name", "my-run", "my-run"),
        ("exp_name", "none", "none"),  # a plain str field keeps the text
        ("reward_pretrain", "none", None),
        ("reward_pretrain", "NULL", None),
        ("reward_pretrain", "/models/rm", "/models/rm"),
        ("train_batch_size", "none", None),
        ("train_batch_size", "256", 256),
        ("dual_clip_c", "3", 3.0),
        ("train_data", "gsm8k_train,math_train", ["gsm8k_train", "math_train"]),
        ("train_data", " gsm8k_train , data/x.jsonl ", ["gsm8k_train", "data/x.jsonl"]),
        ("stop", '["</answer>", " User:"]', ["</answer>", " User:"]),
        ("stop", "", []),
        (
            "data_fields",
            '{"question": "problem", "answer": "final_answer"}',
            {"question": "problem", "answer": "final_answer"},
        ),
        ("data_fields", "orz", "orz"),
        ("data_fields", "none", None),
    ],
)
def test_override_parsing_by_type(key, text, expected):
    cfg = good().with_overrides({key: text})
    value = getattr(cfg, key)
    assert value == expected and type(value) is type(expected)


def test_override_typed_python_values():
    cfg = good().with_overrides({"actor_lr": 2, "stop": ("a", "b"), "reward_pretrain": None, "bf16": False})
    assert cfg.actor_lr == 2.0 and isinstance(cfg.actor_lr, float)
    assert cfg.stop == ["a", "b"] and cfg.reward_pretrain is None and cfg.bf16 is False
    assert good().actor_lr == 1e-6  # with_overrides returns a copy


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("bf16", "maybe", r"bf16='maybe': expected bool \(true/false\) \(use true/false, 1/0, yes/no\)"),
        ("seed", "1.5", r"seed='1.5': expected int \(not an integer\)"),
        ("seed", "abc", r"seed='abc': expected int \(not a number\)"),
        ("seed", True, r"seed=True: expected int"),
        ("actor_lr", "fast", r"actor_lr='fast': expected float"),
        ("train_batch_size", "many", r"train_batch_size='many': expected int or none"),
        ("stop", '["a", ', r"stop=.*invalid JSON list"),
        ("stop", "[1, 2]", r"stop='\[1, 2\]': expected list of str"),
        ("data_fields", "{bad json", r"data_fields=.*invalid JSON object"),
        ("exp_name", 3, r"exp_name=3: expected str"),
    ],
)
def test_override_type_errors_name_field_value_and_type(key, value, pattern):
    with pytest.raises(ConfigError) as info:
        good().with_overrides({key: value})
    assert re.search(pattern, str(info.value)), str(info.value)


def test_unknown_override_suggests_close_names_and_lists_all_errors():
    with pytest.raises(ConfigError) as info:
        good().with_overrides({"acter_lr": "1e-6", "temprature": "0.7", "seed": "x"})
    text = str(info.value)
    assert "unknown field 'acter_lr' (did you mean 'actor_lr'" in text
    assert "unknown field 'temprature' (did you mean 'temperature'" in text
    assert "seed='x'" in text and len(info.value.problems) == 3
    assert good().with_overrides({"acter_lr": "1"}, strict=False) == good()


def test_from_cli_help_debug_and_order(capsys):
    with pytest.raises(SystemExit) as info:
        BasePPOExpConfig.from_cli(["--help"])
    assert info.value.code == 0
    printed = capsys.readouterr().out
    for f in dataclasses.fields(BasePPOExpConfig):
        assert f.name in printed

    cfg = BasePPOExpConfig.from_cli(["pretrain=tiny", "actor_lr=2e-6"], environ={})
    assert cfg.actor_lr == 2e-6 and not cfg.debug and cfg.policy_devices_per_node == 8
    # DEBUG_MODE shrinks first, then explicit overrides win
    cfg = BasePPOExpConfig.from_cli(["pretrain=tiny", "rollout_batch_size=8"], environ={"DEBUG_MODE": "1"})
    assert cfg.debug and cfg.policy_world_size == 1 and cfg.rollout_batch_size == 8
    cfg = BasePPOExpConfig.from_cli(["pretrain=tiny", "debug=true"], environ={})
    assert cfg.debug and cfg.vllm_num_engines == 1
    with pytest.raises(ConfigError, match="bf16='nope'"):
        BasePPOExpConfig.from_cli(["bf16=nope"], environ={})


def test_debug_mode_requested_reads_at_call_time():
    assert debug_mode_requested({"DEBUG_MODE": "1"}) and debug_mode_requested({"DEBUG_MODE": "True"})
    assert not debug_mode_requested({}) and not debug_mode_requested({"DEBUG_MODE": "0"})
    assert not debug_mode_requested({"DEBUG_MODE": "false"}) and not debug_mode_requested({"DEBUG_MODE": ""})
    with pytest.raises(ConfigError, match=r"DEBUG_MODE='debug'"):
        debug_mode_requested({"DEBUG_MODE": "debug"})


# ------------------------------------------------------------------------------------------------- json / table / docs
def test_json_round_trip(tmp_path):
    cfg = good(train_data=["gsm8k_train"], data_fields={"question": "q"}, dual_clip_c=3.0, stop=[])
    path = cfg.save_json(tmp_path / "step_1" / "config.json")
    data = json.loads(path.read_text())
    assert data["_class"] == "reasonrl.config.BasePPOExpConfig" and data["dual_clip_c"] == 3.0
    assert BasePPOExpConfig.from_json(path) == cfg
    assert cfg.to_dict() == {k: v for k, v in data.items() if not k.startswith("_")}
    assert cfg.save_json(tmp_path / "step_1") == path  # a folder gets config.json
    assert not list((tmp_path / "step_1").glob(".*tmp*"))

    data["bogus_field"] = 1
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="unknown field 'bogus_field'"):
        BasePPOExpConfig.from_json(path)
    assert BasePPOExpConfig.from_json(path, strict=False) == cfg


def test_table_marks_changed_fields():
    table = good(actor_lr=2e-6).table()
    lines = table.splitlines()
    assert lines[0].startswith("BasePPOExpConfig (* = differs")
    assert lines[1].split() == ["group", "field", "value"]
    for f in dataclasses.fields(BasePPOExpConfig):
        assert re.search(rf"\b{f.name}\b", table), f.name
    marked = [m for m in (re.match(r"^(?:\S+)?\s+(\w+)\s+\* ", line) for line in lines[3:]) if m]
    names = {m.group(1) for m in marked}
    assert names == {"actor_lr", "pretrain", "device", "generate_max_len"}, names
    assert re.search(r"^optimisation\s+actor_lr\s+\* 2e-06$", table, re.M)


def test_help_text_lists_every_field_with_type_and_default():
    text = BasePPOExpConfig.help_text()
    for f in dataclasses.fields(BasePPOExpConfig):
        assert re.search(rf"^  {f.name}: .+ = ", text, re.M), f.name
        assert f.metadata.get("help"), f"{f.name} has no help text"
        assert f.metadata.get("group") in config_mod.GROUPS, f.name
    assert "  train_batch_size: int | None = None" in text


def test_docs_list_every_field_and_are_up_to_date():
    docs = (REPO / "docs" / "config.md").read_text()
    for f in dataclasses.fields(BasePPOExpConfig):
        assert f"| `{f.name}` |" in docs, f"docs/config.md misses {f.name}"
    start = docs.index(config_mod.DOCS_START) + len(config_mod.DOCS_START)
    generated = docs[start : docs.index(config_mod.DOCS_END)].strip()
    assert generated == BasePPOExpConfig.markdown_reference().strip(), (
        "docs/config.md is stale: run python -m reasonrl.config --write-docs docs/config.md"
    )


def test_module_cli(capsys):
    assert config_mod.main(["pretrain=tiny", "device=cpu", "generate_max_len=512"]) == 0
    assert "config OK" in capsys.readouterr().out
    assert config_mod.main(["pretrain=tiny", "device=cpu"]) == 1
    assert "max_position_embeddings 2048" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------- debug mode
def test_debug_mode_shrinks_any_recipe_and_still_validates(monkeypatch):
    big = good(
        policy_num_nodes=4,
        ref_num_nodes=4,
        critic_num_nodes=4,
        vllm_num_engines=16,
        vllm_tensor_parallel_size=2,
        n_samples_per_prompt=64,
        train_batch_size=2048,  # 4 policy optimizer steps per rollout
        generate_max_len=8000,
        max_prompt_len=2048,
        overlong_buffer_len=2000,
        eval_n_samples=16,
        eval_temperature=1.0,
        pretrain="smollm2",
    )
    small = big.apply_debug_mode()
    assert small.debug and small.exp_name == "reasonrl-debug"
    assert small.policy_world_size == small.critic_world_size == 1
    assert (small.vllm_num_engines, small.vllm_tensor_parallel_size, small.colocate_all) == (1, 1, True)
    assert (small.rollout_batch_size, small.n_samples_per_prompt) == (4, 4)
    assert (small.max_steps, small.max_prompt_len, small.generate_max_len) == (3, 512, 256)  # a few short steps
    assert small.policy_optimizer_steps_per_rollout == 4 and small.train_batch_size == 4
    assert small.overlong_buffer_len == 64 and small.eval_max_prompts == 8 and small.eval_n_samples == 2
    assert small.save_interval == 2 and small.eval_interval == 2
    small.validate()
    monkeypatch.setattr(config_mod, "_local_gpu_count", lambda: 1)
    dataclasses.replace(small, device="gpu").validate()  # fits a one-GPU machine
    assert small.apply_debug_mode() == small  # idempotent
    assert big.pretrain == "smollm2" and big.policy_num_nodes == 4  # the original is untouched


def test_debug_mode_keeps_two_samples_for_group_estimators():
    cfg = good(advantage_estimator="rloo", n_samples_per_prompt=2, critic_num_nodes=0).apply_debug_mode()
    assert cfg.n_samples_per_prompt == 2 and cfg.critic_num_nodes == 1
    cfg.validate()
    assert good(n_samples_per_prompt=1).apply_debug_mode().n_samples_per_prompt == 1
    # the caps only lower: shorter lengths and fewer steps than the caps are kept
    kept = good(max_steps=2, max_prompt_len=64, generate_max_len=32).apply_debug_mode()
    assert (kept.max_steps, kept.max_prompt_len, kept.generate_max_len) == (2, 64, 32)
    assert good().apply_env_debug({"DEBUG_MODE": "1"}).debug
    assert good().apply_env_debug({}) == good()


# ------------------------------------------------------------------------------------------------- subclassing
def test_notebook_style_subclassing_in_process(tmp_path):
    @dataclass
    class MyCfg(BasePPOExpConfig):
        pretrain: str = "tiny"
        device: str = "cpu"
        actor_lr: float = 1e-5
        generate_max_len: int = 256
        train_data: list[str] = field(default_factory=lambda: ["gsm8k_train"])
        my_bonus: float = 0.5  # a field of the user's own hooks

    cfg = MyCfg()
    assert (cfg.actor_lr, cfg.train_data, cfg.my_bonus) == (1e-5, ["gsm8k_train"], 0.5)
    cfg.validate()
    tuned = cfg.with_overrides({"actor_lr": "3e-6", "my_bonus": "2", "advantage_estimator": "grpo"})
    assert type(tuned) is MyCfg and tuned.actor_lr == 3e-6 and tuned.my_bonus == 2.0
    tuned.validate()
    with pytest.raises(ConfigError, match="my_bonus='lots': expected float"):
        cfg.with_overrides({"my_bonus": "lots"})
    with pytest.raises(ConfigError, match="temperature"):
        cfg.with_overrides({"temperature": "0"}).validate()
    assert MyCfg.from_json(tuned.save_json(tmp_path / "c.json")) == tuned
    table = tuned.table()
    assert re.search(r"^custom\s+my_bonus\s+\* 2\.0$", table, re.M)
    assert re.search(r"actor_lr\s+\* 3e-06", table)
    assert "my_bonus: float = 0.5" in MyCfg.help_text()
    debug = MyCfg.from_cli(["my_bonus=1"], environ={"DEBUG_MODE": "1"})
    assert type(debug) is MyCfg and debug.debug and debug.my_bonus == 1.0
    debug.validate()


def test_subclass_defaults_that_dataclasses_would_ignore_are_refused():
    @dataclass
    class NoAnnotation(BasePPOExpConfig):
        pretrain = "tiny"  # no annotation: not a field

    with pytest.raises(
        ConfigError, match=r"NoAnnotation\.pretrain = 'tiny' is ignored.*pretrain: str \| None = 'tiny'"
    ):
        NoAnnotation()

    class NoDecorator(BasePPOExpConfig):
        actor_lr: float = 1e-5

    with pytest.raises(ConfigError, match=r"NoDecorator\.actor_lr = 1e-05 is ignored.*@dataclass"):
        NoDecorator()

    @dataclass
    class Fine(BasePPOExpConfig):
        pretrain: str = "tiny"

        @property
        def total(self) -> int:
            return 1

    assert Fine().pretrain == "tiny"


# ------------------------------------------------------------------------------------------------- mapping helpers
def test_role_resources_disable_unused_roles():
    res = good().role_resources()
    assert res["policy"].world_size == 8 and res["critic"].enabled
    assert not res["ref"].enabled and not res["reward"].enabled
    assert res["vllm"].num_engines == 8
    kl = dict(advantage_estimator="grpo", kl_mode="loss", init_kl_coef=1e-3)
    res = good(**kl, reference_process="own").role_resources()
    assert not res["critic"].enabled and res["ref"].enabled
    assert not good(**kl).role_resources()["ref"].enabled  # auto on CPU: each policy rank holds the reference
    (group,) = good().placement_requests()
    assert set(group.roles) == {"policy", "critic", "vllm"} and group.num_bundles == 8


def test_worker_and_loss_configs(tmp_path):
    from reasonrl.run.role_settings import worker_config

    policy_dir = model_dir(tmp_path, "policy")
    critic_dir = model_dir(tmp_path, "critic")
    cfg = good(
        pretrain=str(policy_dir),
        critic_pretrain=str(critic_dir),
        train_batch_size=512,
        critic_train_batch_size=256,
        lr_warmup_steps=5,
        lr_schedule="cosine",
        optimizer_offload=True,
        ref_offload_params=True,
        kl_mode="loss",
        init_kl_coef=1e-3,
        agg_mode="seq-mean-token-sum-norm",
        bf16=False,
    )
    policy = worker_config(cfg, "policy", num_rollout_steps=10, pad_token_id=3)
    assert policy.model_path == str(policy_dir) and policy.lr == cfg.actor_lr and policy.pad_token_id == 3
    # warmup counts each model's own optimizer steps (ORZ/OpenRLHF/verl), not rollouts
    assert (policy.warmup_steps, policy.total_steps, policy.lr_schedule) == (5, 40, "cosine")
    assert policy.offload_optimizer and not policy.offload_params
    # the user's choice travels unresolved: each worker resolves "auto" for its own placement (issue 22 item 6)
    assert policy.attn_implementation == cfg.attn_implementation == "auto"
    critic = worker_config(cfg, "critic", num_rollout_steps=10)
    assert critic.model_path == str(critic_dir) and critic.lr == cfg.critic_lr and critic.total_steps == 80
    assert critic.warmup_steps == 5
    ref = worker_config(cfg, "ref")
    assert ref.model_path == str(policy_dir) and ref.offload_params and not ref.gradient_checkpointing
    with pytest.raises(ValueError, match="num_rollout_steps"):
        worker_config(cfg, "policy")
    with pytest.raises(ValueError, match="unknown role"):
        worker_config(cfg, "vllm")
    # packing only where it saves compute (flash-attention's varlen kernels), decided by each worker for the backend
    # it resolved: the driver passes the mode, not the decision
    assert cfg.packing_samples and policy.packing == ref.packing == critic.packing == "auto"
    no_pack = dataclasses.replace(cfg, packing_samples=False)
    assert worker_config(no_pack, "policy", num_rollout_steps=10).packing == "off"
    # one policy step per rollout: the update reuses its own log-probs, unless the reward needs the old ones
    assert not cfg.reuses_current_logprobs  # train_batch_size=512: several policy steps per rollout
    assert good().reuses_current_logprobs and good().policy_loss_config().reuse_current_logprobs
    assert not good(kl_mode="reward", init_kl_coef=0.1).reuses_current_logprobs
    assert not good(policy_epochs=2).reuses_current_logprobs

    loss = cfg.policy_loss_config()
    assert (loss.norm_constant, loss.agg_mode) == (512.0, "seq-mean-token-sum-norm")
    # one source for the KL loss coefficient: the KL controller's value, sent with each update (tests/loop)
    assert not hasattr(loss, "kl_loss_coef") and not hasattr(loss, "entropy_coef")
    assert good().policy_loss_config().norm_constant is None
    value = good(value_clip=None).value_loss_config()
    assert value.clip_eps is None and value.agg_mode == "seq-mean-token-mean"
    reward = good(format_reward=0.1, overlong_buffer_len=64).reward_config()
    assert (reward.format_reward, reward.overlong_buffer_len, reward.max_response_length) == (0.1, 64, 512)
    assert cfg.resolved_sync_verify_tolerance == 1e-4 and good().resolved_sync_verify_tolerance == 0.1
    assert good().resolved_vllm_max_model_len == 1536


def test_model_paths_from_hf_cache(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--Org--Model-1B" / "snapshots" / "abc123"
    model_dir(snapshot.parent, snapshot.name, max_position_embeddings=1024)
    (tmp_path / "hub" / "models--Org--Model-1B" / "refs").mkdir()
    (tmp_path / "hub" / "models--Org--Model-1B" / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert BasePPOExpConfig.resolve_model_path("Org/Model-1B") == str(snapshot)
    good(pretrain="Org/Model-1B", generate_max_len=512, max_prompt_len=512).validate()
    with pytest.raises(ConfigError, match="max_position_embeddings 1024"):
        good(pretrain="Org/Model-1B").validate()
    assert BasePPOExpConfig.resolve_model_path(None) is None
    assert BasePPOExpConfig.resolve_model_path("~/x") == str(Path("~/x").expanduser())

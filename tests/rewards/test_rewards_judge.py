"""LLM as judge, the pure parts (``reasonrl.rewards.judge``): the template, the parse rules, the score mapping, the
unparsed value and its counts, the per-data_source mix with the rule reward, the metrics and the dumps. The judge
model here is a scripted ``generate`` that computes its verdict from the prompt it is given (the real engine's
verdicts are checked in tests/distributed/test_judge_engine.py); the rule scorer is the real ExactMatchScorer."""

from __future__ import annotations

import textwrap

import pytest

from reasonrl.dataplane.completion import Completion
from reasonrl.loop.rollout import rollout_metrics, sample_records
from reasonrl.rewards.judge import (
    DEFAULT_TEMPLATE,
    UNPARSED_REASON,
    JudgeScorer,
    JudgeSpecError,
    JudgeTemplate,
    JudgeWeights,
    judge_metrics,
    parse_rule,
)
from reasonrl.rewards.scorers import ExactMatchScorer
from reasonrl.rewards.shaping import RewardConfig

RC = RewardConfig(correct_reward=1.0, wrong_reward=-0.5)


def completion(text: str, finish: str = "stop") -> Completion:
    return Completion(0, 0, [1], [5, 6, 7], text, finish)


class ScriptedJudge:
    """A judge model that reads the response part of the default template's prompt and answers from it: 'no' when
    the response holds 'wrong', else 'yes' when it holds the reference, and prose without a verdict otherwise. Keeps the
    prompts it was sent."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def __call__(self, prompts):
        self.calls.append(list(prompts))
        out = []
        for p in prompts:
            reference = p.split("Reference answer:\n", 1)[1].split("\n", 1)[0]
            response = p.split("Response:\n", 1)[1].split("\n\nDoes the response", 1)[0]
            if "wrong" in response:
                out.append("No, it does not.")
            elif reference and reference in response:
                out.append("The response reaches it. Verdict: yes")
            else:
                out.append("I cannot tell.")
        return out


JUDGE_ALONE = JudgeWeights(1.0)


def judge_scorer(generate, weights=JUDGE_ALONE, inner=None, unparsed=None, parse="yes_no"):
    return JudgeScorer(
        inner,
        generate,
        template=JudgeTemplate(),
        parse=parse_rule(parse),
        weights=weights,
        reward_config=RC,
        unparsed_reward=unparsed,
    )


# ------------------------------------------------------------------------------------------------ template
def test_default_template_substitutes_the_row_and_never_evaluates_the_response():
    row = {"question": "What is 6*7?", "answer": "42"}
    response = "{{ 7 * 7 }} {% for x in range(3) %}x{% endfor %} __class__"
    prompt = JudgeTemplate().render(row["question"], response, row)
    assert "What is 6*7?" in prompt and "Reference answer:\n42\n" in prompt
    assert response in prompt  # model output is text: its jinja syntax stays as written
    assert prompt.startswith(DEFAULT_TEMPLATE.split("{{", 1)[0])


def test_user_template_file_gets_every_variable(tmp_path):
    path = tmp_path / "judge.jinja"
    path.write_text("{{ data_source }}|{{ question }}|{{ reference }}|{{ response }}|{{ row.id }}")
    row = {"question": "q", "answer": 3, "id": "r7", "data_source": "math"}
    assert JudgeTemplate.from_spec(str(path)).render("q", "resp", row) == "math|q|3|resp|r7"
    assert JudgeTemplate.from_spec(str(path)).render(None, "r", {"id": 1}) == "|||r|1"  # absent: empty


def test_template_errors_name_the_field(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ question ")
    with pytest.raises(JudgeSpecError, match="judge_template"):
        JudgeTemplate.from_spec(str(bad))
    typo = tmp_path / "typo.jinja"
    typo.write_text("{{ questoin }}")
    with pytest.raises(JudgeSpecError, match="judge_template.*question, response, reference"):
        JudgeTemplate.from_spec(str(typo)).render("q", "r", {})
    with pytest.raises(JudgeSpecError, match="no such file"):
        JudgeTemplate.from_spec(str(tmp_path / "missing.jinja"))
    sandboxed = tmp_path / "escape.jinja"
    sandboxed.write_text("{{ row.__class__.__mro__ }}")
    with pytest.raises(JudgeSpecError):  # the sandbox refuses Python internals
        JudgeTemplate.from_spec(str(sandboxed)).render("q", "r", {})


# ------------------------------------------------------------------------------------------------ parse rules
@pytest.mark.parametrize(
    ("spec", "text", "expected"),
    [
        ("yes_no", "Yes.", 1.0),
        ("yes_no", "no", 0.0),
        ("yes_no", "No at first... but on reflection YES", 1.0),  # the last verdict word
        ("yes_no", "nobody knows; yesterday", None),  # whole words only
        ("last_number:0:10", "Score: 7", 0.7),
        ("last_number:1:5", "between 2 and 4.5", (4.5 - 1) / 4),
        ("last_number:0:10", "Score: 11", None),  # outside the range
        ("last_number:-1:1", "-1", 0.0),
        ("last_number:0:10", "no digits", None),
        ("boxed", "so \\boxed{yes}", 1.0),
        ("boxed", "\\boxed{Incorrect}", 0.0),
        ("boxed", "\\boxed{0.25}", 0.25),
        ("boxed", "\\boxed{2}", None),
        ("boxed", "yes", None),
    ],
)
def test_builtin_parse_rules(spec, text, expected):
    got = parse_rule(spec)(text)
    assert got == (None if expected is None else pytest.approx(expected))


def test_user_parse_function_and_its_failures_are_unparsed(tmp_path):
    path = tmp_path / "parse.py"
    path.write_text(
        textwrap.dedent(
            """
            def grade(text):
                if text == "boom":
                    raise RuntimeError("cannot read it")
                if text == "big":
                    return 3
                return None if text == "none" else len(text) / 10
            """
        )
    )
    parse = parse_rule(f"{path}:grade")
    assert parse("abc") == pytest.approx(0.3)
    assert parse("none") is None and parse("boom") is None and parse("big") is None


@pytest.mark.parametrize("spec", ["last_number:5:1", "last_number:0", "last_number:a:b", "maybe", "nofile.py:fn"])
def test_bad_parse_specs_name_the_field(spec):
    with pytest.raises(JudgeSpecError, match="judge_parse"):
        parse_rule(spec)


# ------------------------------------------------------------------------------------------------ scoring
ROWS = [
    {"question": "6*7?", "answer": "42"},
    {"question": "2+2?", "answer": "4"},
    {"question": "1+1?", "answer": "2"},
    {"question": "3+3?", "answer": "6"},
]
TEXTS = ["It is 42", "wrong: 5", "hmm", "6"]


def test_judge_alone_maps_scores_and_counts_unparsed():
    judge = ScriptedJudge()
    scorer = judge_scorer(judge, unparsed=-2.0)
    completions = [completion(t) for t in TEXTS[:3]] + [completion(TEXTS[3], finish="length")]
    results = scorer(completions, ROWS)
    # the truncated sample is not sent to the judge; the prompts are the template's rendering of the others
    assert judge.calls == [
        [JudgeTemplate().render(r["question"], t, r) for r, t in zip(ROWS[:3], TEXTS[:3], strict=True)]
    ]
    texts = judge(judge.calls[0])
    scores = [parse_rule("yes_no")(t) for t in texts]
    expected = [RC.wrong_reward + s * (RC.correct_reward - RC.wrong_reward) if s is not None else -2.0 for s in scores]
    assert [r.reward for r in results[:3]] == pytest.approx(expected)
    assert [r.judge.text for r in results[:3]] == texts
    assert results[2].reason == UNPARSED_REASON and results[2].judge.unparsed
    assert [r.correct for r in results] == [s == 1.0 for s in scores] + [False]
    assert results[3].reward == RC.wrong_reward and results[3].judge.text is None and not results[3].judge.judged
    assert (scorer.num_judged, scorer.num_unparsed) == (3, 1)
    m = judge_metrics(results)
    assert m["reward/judge_judged"] == 3.0 and m["reward/judge_unparsed"] == 1.0 and m["reward/judge_failed"] == 0
    assert m["reward/judge_score_mean"] == pytest.approx(sum(s for s in scores if s is not None) / 2)


def test_unparsed_defaults_to_the_wrong_reward():
    results = judge_scorer(ScriptedJudge())([completion("hmm")], [ROWS[2]])
    assert results[0].judge.unparsed and results[0].reward == RC.wrong_reward


def test_failed_judge_requests_are_unparsed_and_counted():
    scorer = judge_scorer(lambda prompts: [None, "yes"], unparsed=-1.0)
    results = scorer([completion("a"), completion("b")], ROWS[:2])
    assert [r.reward for r in results] == [-1.0, RC.correct_reward]
    assert results[0].judge.failed and results[0].judge.unparsed
    m = judge_metrics(results)
    assert m["reward/judge_failed"] == 1.0 and m["reward/judge_unparsed"] == 1.0


def test_weights_mix_the_rule_and_the_judge_per_data_source():
    rule = ExactMatchScorer(RC)
    weights = JudgeWeights(default=0.25, by_source={"exact_match": 0.0, "judged": 1.0})
    rows = [
        {"question": "6*7?", "answer": "42"},  # default weight 0.25
        {"question": "2+2?", "answer": "4", "data_source": "exact_match"},  # not judged
        {"question": "1+1?", "answer": "2", "data_source": "judged"},  # judge only: the rule never sees it
        {"question": "3+3?", "answer": "6"},  # 0.25, the rule says right, the judge says no
    ]
    texts = ["\\boxed{42}", "\\boxed{4}", "wrong", "\\boxed{6} (wrong?)"]
    judge = ScriptedJudge()
    scorer = judge_scorer(judge, weights=weights, inner=rule)
    completions = [completion(t) for t in texts]
    results = scorer(completions, rows)
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 3  # the w == 0 row was not judged
    rule_alone = ExactMatchScorer(RC)([completions[i] for i in (0, 1, 3)], [rows[i] for i in (0, 1, 3)])
    verdict = {i: parse_rule("yes_no")(t) for i, t in zip((0, 2, 3), judge(judge.calls[0]), strict=True)}

    def judged(i):
        s = verdict[i]
        return RC.wrong_reward if s is None else RC.wrong_reward + s * (RC.correct_reward - RC.wrong_reward)

    assert results[0].reward == pytest.approx(0.75 * rule_alone[0].reward + 0.25 * judged(0))
    assert results[1].reward == rule_alone[1].reward and results[1].judge is None
    assert results[2].reward == pytest.approx(judged(2)) and results[2].reason == "judge"
    assert results[3].reward == pytest.approx(0.75 * rule_alone[2].reward + 0.25 * judged(3))
    assert rule_alone[2].correct and verdict[3] == 0.0
    assert results[3].correct is False  # the rule says right, the judge says no
    assert results[0].correct is (rule_alone[0].correct and verdict[0] == 1.0)
    assert [r.judge.weight for r in (results[0], results[2], results[3])] == [0.25, 1.0, 0.25]


def test_shaping_terms_are_added_once_unweighted():
    config = RewardConfig(correct_reward=1.0, wrong_reward=0.0, format_reward=0.5)
    rule = ExactMatchScorer(config)
    text = "<think>x</think> <answer>\\boxed{7}</answer>"
    row = {"question": "3+4?", "answer": "7"}
    scorer = JudgeScorer(
        rule,
        lambda prompts: ["no"],
        template=JudgeTemplate(),
        parse=parse_rule("yes_no"),
        weights=JudgeWeights(0.5),
        reward_config=config,
    )
    (alone,) = ExactMatchScorer(config)([completion(text)], [row])
    (mixed,) = scorer([completion(text)], [row])
    assert alone.format_bonus == 0.5
    assert mixed.reward == pytest.approx(0.5 * (alone.reward - alone.format_bonus) + 0.5 * 0.0 + alone.format_bonus)


def test_a_judge_without_a_model_says_so():
    with pytest.raises(RuntimeError, match="attach"):
        judge_scorer(None)([completion("x")], [ROWS[0]])


def test_metrics_and_dumps_carry_the_verdicts():
    judge = ScriptedJudge()
    completions = [completion(t) for t in TEXTS[:3]]
    results = judge_scorer(judge)(completions, ROWS[:3])
    m = rollout_metrics(completions, results, generate_max_len=16)
    assert m["reward/judge_unparsed"] == 1.0 and m["reward/judge_judged"] == 3.0
    records = sample_records(completions, results, ROWS[:3])
    assert [r["judge_text"] for r in records] == [r.judge.text for r in results]
    assert [r["judge_score"] for r in records] == [r.judge.score for r in results]
    assert judge_metrics([completion("x")]) == {}  # nothing judged: no judge figures at all

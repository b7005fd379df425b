"""The calculator-tool multiplication task (``tool_mul_*``) and its SFT conversations: deterministic, held-out split
disjoint from training, products the calculator reproduces, answers the default math scorer rewards."""

from __future__ import annotations

import pytest

from reasonrl.agents.calculator import calculate
from reasonrl.agents.tool_calls import parse_tool_calls
from reasonrl.data import load_rows
from reasonrl.data.arithmetic import GENERATED_DATASETS
from reasonrl.data.tool_tasks import ToolMulTask, ToolTraceSet, direct_trace, tool_trace
from reasonrl.rewards.extract import extract_answer
from reasonrl.rewards.verify import answers_match

SMALL = ToolMulTask(train_size=3000, heldout_size=100, seed=3)


def _pair(row: dict) -> tuple[int, int]:
    a, b = row["messages"][0]["content"].removesuffix("=?").split("*")
    return int(a), int(b)


def test_rows_are_deterministic_products_in_range_and_heldout_disjoint():
    train, heldout = SMALL.rows("train"), SMALL.rows("heldout")
    assert train == SMALL.rows("train") and len(train) == 3000 and len(heldout) == 100
    assert train != ToolMulTask(train_size=3000, seed=4).rows("train")
    for row in train[:500] + heldout:
        a, b = _pair(row)
        assert 10 <= a <= 99 and 10 <= b <= 99 and row["answer"] == str(a * b)
        assert row["tools"] == ["calculator"] and row["messages"] == [{"role": "user", "content": f"{a}*{b}=?"}]
    assert len({_pair(r) for r in heldout}) == 100, "held-out problems are distinct"
    assert not {_pair(r) for r in heldout} & {_pair(r) for r in train}
    wide = ToolMulTask(a_digits=(3, 4), b_digits=(2, 4), train_size=3000, seed=3).rows("train")
    digits = {len(str(_pair(r)[0])) for r in wide} | {len(str(_pair(r)[1])) for r in wide}
    assert digits == {2, 3, 4}
    with pytest.raises(ValueError, match="a_digits"):
        ToolMulTask(a_digits=(4, 3))


def test_builtin_names_load_as_chat_rows_with_their_tools():
    names = ["tool_mul_train", "tool_mul_heldout", "tool_mul_sft_train", "tool_mul_sft_heldout"]
    names += ["tool_mul_notool_sft_train", "tool_mul_notool_sft_heldout"]
    assert set(names) <= set(GENERATED_DATASETS)
    heldout = load_rows("tool_mul_heldout").rows
    assert len(heldout) == 200
    row = heldout[0]
    assert row["question"].endswith("=?") and row["tools"] == ["calculator"]
    assert row["messages"] == [{"role": "user", "content": row["question"]}]
    assert not {r["question"] for r in heldout} & {r["question"] for r in load_rows("tool_mul_train", limit=3000)}
    traces = load_rows("tool_mul_sft_heldout", keep_reply=True).rows
    assert [t["question"] for t in traces] == [r["question"] for r in heldout], "traces of the same problems"
    assert [t["role"] for t in traces[0]["reply_messages"]] == ["assistant", "tool", "assistant"]


def test_traces_call_the_calculator_in_the_canonical_format_and_box_the_product():
    convo = tool_trace(4821, 937)
    assert convo[1]["content"] == (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "4821*937"}}\n</tool_call>'
    )
    assert [t["role"] for t in convo] == ["user", "assistant", "tool", "assistant"]
    (call,), errors = parse_tool_calls(convo[1]["content"])
    assert not errors and call.name == "calculator" and calculate(**call.arguments) == convo[2]["content"] == "4517277"
    assert convo[3]["content"] == "The answer is \\boxed{4517277}."
    assert direct_trace(4821, 937) == [convo[0], convo[3]]
    rows = ToolTraceSet(SMALL).rows("heldout")
    for row, problem in zip(rows, SMALL.rows("heldout"), strict=True):
        assert row["messages"] == tool_trace(*_pair(problem)) and row["answer"] == problem["answer"]
    assert ToolTraceSet(SMALL).key != ToolTraceSet(SMALL, use_tool=False).key != SMALL.key


@pytest.mark.parametrize("mode", ["auto", "boxed"])
def test_the_math_scorer_reads_the_final_turn(mode):
    final = tool_trace(4821, 937)[-1]["content"]
    answer = extract_answer(final, mode).answer
    assert answer == "4517277" and answers_match(answer, "4517277")[0]
    assert not answers_match(extract_answer("The answer is \\boxed{4517278}.", mode).answer, "4517277")[0]

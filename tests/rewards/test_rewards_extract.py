"""Answer extraction: formats, edge cases, and linear time on hostile input."""

from __future__ import annotations

import time

import pytest

from reasonrl.rewards.extract import (
    answer_is,
    answer_tag_content,
    extract_answer,
    extract_choice,
    gsm8k_answer,
    last_boxed,
    match_braces,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{5}", "5"),
        ("a \\boxed{1} b \\boxed{2}", "2"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\boxed{{{x}}}", "{{x}}"),
        ("\\fbox{7}", "7"),
        ("\\boxed {8}", "8"),
        ("\\boxed 9.", "9"),
        ("\\boxed{3} then \\boxed{4", "3"),  # unclosed last box: the previous complete one
        ("\\boxed{a \\\\ b}", "a \\\\ b"),
        ("\\boxedx{3}", None),
        ("no box", None),
        ("\\boxed{", None),
        ("", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


def test_match_braces_skips_escaped():
    text = "{a\\{b}c}"
    assert match_braces(text) == {0: 5}


def test_answer_tags():
    assert answer_tag_content("<answer>1</answer> x <answer> 2 </answer>") == "2"
    assert answer_tag_content("<answer>1") is None
    assert answer_tag_content("<answer>1", require_closed=False) == "1"
    assert answer_tag_content("</answer><answer>") is None


def test_gsm8k_and_answer_is():
    assert gsm8k_answer("steps\n#### 1,234\n") == "1234"
    assert gsm8k_answer("#### 5 #### 6") == "6"
    assert gsm8k_answer("no hashes") is None
    assert answer_is("So the answer is 42.") == "42"
    assert answer_is("The final answer is $3.5$. I hope it is correct.") == "3.5"
    assert answer_is("Final Answer: x = 2\nmore text") == "x = 2"
    assert answer_is("the answer is \\boxed{7} obviously") == "7"
    assert answer_is("nothing") is None


@pytest.mark.parametrize(
    "text, mode, expected",
    [
        ("<think>x</think> <answer>\\boxed{5}</answer>", "orz", "5"),
        ("<think>x</think> <answer>5</answer>", "orz", None),  # ORZ needs a box inside the tags
        ("\\boxed{5}", "orz", None),
        ("<answer>5</answer>", "answer_tag", "5"),
        ("<answer>The answer is 5.</answer>", "answer_tag", "5"),
        ("<answer>\\boxed{4}</answer> \\boxed{5}", "auto", "4"),
        ("\\boxed{5}\n#### 6", "auto", "5"),
        ("\\boxed{5}\n#### 6", "gsm8k", "6"),
        ("The answer is 6", "boxed", None),
        ("The answer is 6", "auto", "6"),
        ("The number 6 appears", "auto", None),  # no last-number fallback
        ("<answer>" + "x" * 400 + "</answer>", "auto", None),  # long untagged content is not an answer
    ],
)
def test_extract_modes(text, mode, expected):
    assert extract_answer(text, mode).answer == expected


def test_extract_errors():
    with pytest.raises(ValueError, match="unknown extract mode"):
        extract_answer("x", "nope")
    with pytest.raises(TypeError):
        extract_answer(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "answer, letter",
    [
        ("B", "B"),
        ("(b)", None),
        ("b", "B"),
        ("\\text{(C)}", "C"),
        ("\\textbf{(D)}", "D"),
        ("E) 42", "E"),
        ("A: 12", "A"),
        ("Option B", "B"),
        ("A, B", None),
        ("(B) or (C)", None),
        ("(B), (C)", None),
        ("B) 42 or C) 43", None),
        ("B. It is larger than (3)", "B"),
        ("42", None),
        ("AB", None),
    ],
)
def test_extract_choice(answer, letter):
    assert extract_choice(answer) == letter


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{" * 50_000,
        "{" * 200_000,
        "}" * 200_000 + "\\boxed{1}",
        "<answer>" * 50_000,
        "the answer is " * 30_000,
        "#### " * 50_000,
        "\\fbox " * 50_000,
        "\\" * 300_000,
    ],
    ids=["open-boxes", "open-braces", "close-braces", "open-tags", "answer-is", "hashes", "fbox-space", "backslashes"],
)
def test_extraction_is_fast_on_hostile_input(text):
    start = time.perf_counter()
    for mode in ("auto", "orz", "boxed", "gsm8k", "answer_is", "answer_tag"):
        extract_answer(text, mode)
    assert time.perf_counter() - start < 2.0

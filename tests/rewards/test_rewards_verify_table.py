"""The verification truth table: (response, gold, expected) where ``expected`` is the mathematical truth.

Every case is a real call through the session's ``RewardVerifier`` (worker processes, hard timeout).
``B(x)`` wraps a bare prediction the way a model answers ("... $\\boxed{x}$."). Cases that math-verify and our
normalisation still get wrong are listed in ``KNOWN_LIMITATIONS`` and run as strict xfail, so a fix shows up.
"""

from __future__ import annotations

import pytest


def B(x: str) -> str:
    return f"Let me compute this step by step. So the final answer is $\\boxed{{{x}}}$."


FRACTIONS_DECIMALS_PERCENT = [
    (B("\\frac{1}{2}"), "0.5", True),
    (B("0.5"), "\\frac12", True),
    (B("\\dfrac{3}{4}"), "0.75", True),
    (B("\\tfrac{3}{4}"), "\\frac{3}{4}", True),
    (B("3/4"), "\\frac{3}{4}", True),
    (B("6/8"), "\\frac34", True),
    (B("0.75"), "3/4", True),
    (B("0.7"), "\\frac{3}{4}", False),
    (B("1/3"), "0.33", False),
    (B("\\frac{2}{3}"), "\\frac{3}{2}", False),
    (B("-\\frac{1}{2}"), "-0.5", True),
    (B("\\frac{-1}{2}"), "-\\frac{1}{2}", True),
    (B("-\\frac{1}{2}"), "\\frac{1}{2}", False),
    (B("50\\%"), "50", True),
    (B("50\\%"), "0.5", True),
    (B("0.5"), "50\\%", True),
    (B("5\\%"), "0.5", False),
    (B("12.5\\%"), "\\frac{1}{8}", True),
    (B("2.50"), "2.5", True),
    (B("2.5"), "2.05", False),
    (B("1.0"), "1", True),
    (B("0.1+0.2"), "0.3", True),
    (B("1{,}000"), "1000", True),
    (B("1,000,000"), "1000000", True),
    (B("1,000"), "100", False),
    (B("3.14"), "\\pi", False),
    (B("\\frac{22}{7}"), "\\pi", False),
    (B("\\frac{10}{4}"), "2.5", True),
    (B("\\frac{5}{2}"), "\\frac{10}{4}", True),
    (B("\\frac{7}{3}"), "2\\frac{1}{3}", True),
    (B("0.\\overline{3}"), "\\frac13", True),
    (B("0.1\\overline{6}"), "\\frac16", True),
    (B("25\\%"), "\\frac14", True),
    (B("\\frac{1}{2}\\%"), "0.005", True),
    (B("1\\,000"), "1000", True),
    (B(".5"), "0.5", True),
    (B("5."), "5", True),
    (B("2\\frac{1}{2}"), "2.5", True),
]

LATEX_FORMS = [
    (B("\\left( 3, \\frac{\\pi}{2} \\right)"), "(3,\\frac{\\pi}{2})", True),
    (B("\\left(3,\\frac{\\pi}{2}\\right)"), "\\left( 3, \\frac{\\pi}{2} \\right)", True),
    (B("\\frac{\\sqrt{3}}{2}"), "\\frac{\\sqrt3}{2}", True),
    (B("\\sqrt{8}"), "2\\sqrt{2}", True),
    (B("2\\sqrt2"), "\\sqrt{8}", True),
    (B("3\\sqrt{2}"), "\\sqrt{18}", True),
    (B("\\sqrt{3}"), "3", False),
    (B("x^2+2x+1"), "(x+1)^2", True),
    (B("x^{2} + 2 x + 1"), "(x+1)^2", True),
    (B("(x+1)^2"), "x^2+1", False),
    (B("2 \\cdot 3"), "6", True),
    (B("2\\times 3"), "6", True),
    (B("\\!\\!5\\,"), "5", True),
    (B("\\displaystyle\\frac{1}{2}"), "0.5", True),
    (B("\\left[1,2\\right]"), "[1,2]", True),
    (B("\\pi/2"), "\\frac{\\pi}{2}", True),
    (B("\\sin(\\pi/6)"), "\\frac{1}{2}", True),
    (B("\\binom{5}{2}"), "10", True),
    (B("5!"), "120", True),
    (B("2^{10}"), "1024", True),
    (B("\\sqrt[3]{27}"), "3", True),
    (B("\\frac{1}{\\sqrt{2}}"), "\\frac{\\sqrt{2}}{2}", True),
    (B("\\frac{1}{\\sqrt{3}}"), "\\frac{\\sqrt{2}}{2}", False),
    (B("\\dfrac{\\pi}{4}"), "\\frac{\\pi}{4}", True),
    (B("4\\pi"), "4 \\pi", True),
    (B("2\\pi r"), "2 \\pi r", True),
    (B("\u22123"), "-3", True),
    (B("a+b"), "b+a", True),
    (B("a-b"), "b-a", False),
    (B("\\frac{x}{2}"), "0.5x", True),
    (B("\\sqrt{2}/2"), "\\frac{\\sqrt2}{2}", True),
    (B("\\log_2 8"), "3", True),
    (B("\\frac{1}{2}x"), "\\frac{x}{2}", True),
    (B("10000"), "10^4", True),
    (B("\\cos^2 x + \\sin^2 x"), "1", True),
    (B("3 \\cdot 10^{2}"), "300", True),
    (B("1.5 \\times 10^{3}"), "1500", True),
    (B("\\sqrt{x^2}"), "x", False),
    (B("2x"), "2y", False),
    (B("x^{-1}"), "\\frac{1}{x}", True),
    (B("\\frac{\\sqrt{6}}{3}"), "\\sqrt{\\frac{2}{3}}", True),
    (B("\\frac{1}{2}+\\frac{1}{3}"), "\\frac56", True),
    (B("\\begin{bmatrix} 1 & 2 \\\\ 3 & 4 \\end{bmatrix}"), "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
    (B("e^{i\\pi}"), "-1", True),
    (B("\\sqrt{-1}"), "i", True),
    (B("i"), "\\sqrt{-1}", True),
    (B("\\tan 45^\\circ"), "1", True),
]

SETS_INTERVALS = [
    (B("\\{1,2,3\\}"), "\\{3,2,1\\}", True),
    (B("\\{1,2\\}"), "\\{1,2,3\\}", False),
    (B("[1,2)"), "[1,2)", True),
    (B("(1,2]"), "[1,2)", False),
    (B("[1,2]"), "[1,2)", False),
    (B("(-\\infty, 3]"), "(-\\infty,3]", True),
    (B("x \\le 3"), "(-\\infty, 3]", True),
    (B("x < 3"), "(-\\infty, 3]", False),
    (B("(-\\infty,0)\\cup(1,\\infty)"), "(-\\infty,0) \\cup (1,\\infty)", True),
    (B("(1,\\infty)\\cup(-\\infty,0)"), "(-\\infty,0)\\cup(1,\\infty)", True),
    (B("(-\\infty,0]\\cup(1,\\infty)"), "(-\\infty,0)\\cup(1,\\infty)", False),
    (B("1, 2, 3"), "\\{1,2,3\\}", True),
    (B("3, 1, 2"), "1,2,3", True),
    (B("1, 2"), "1,2,3", False),
    (B("\\emptyset"), "\\emptyset", True),
    (B("[0, 1]"), "0 \\le x \\le 1", True),
    (B("(0, 1)"), "0 \\le x \\le 1", False),
    (B("-2, 2"), "2, -2", True),
    (B("\\{-2, 2\\}"), "\\{2\\}", False),
    (B("[-1, 1]"), "[-1,1]", True),
    (B("\\pm 2"), "2,-2", True),
    (B("x=2 \\text{ or } x=-2"), "2,-2", True),
    (B("\\mathbb{R}"), "(-\\infty,\\infty)", True),
    (B("3 \\text{ and } 4"), "3, 4", True),
    (B("x \\in \\{1,2\\}"), "\\{1,2\\}", True),
    (B("x>3"), "(3,\\infty)", True),
    (B("2"), "2 \\text{ and } 3", False),
    (B("\\{x \\mid x > 0\\}"), "(0,\\infty)", True),
]

TUPLES = [
    (B("(1,2)"), "(1,2)", True),
    (B("(2,1)"), "(1,2)", False),
    (B("(1, 2, 3)"), "(1,2,3)", True),
    (B("(3,2,1)"), "(1,2,3)", False),
    (B("(0.5, 1)"), "(\\frac12, 1)", True),
    (B("\\left(-1, \\frac{3}{2}\\right)"), "(-1,1.5)", True),
    (B("(1,2,3)"), "(1,2)", False),
    (B("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"), "\\begin{pmatrix}1\\\\2\\end{pmatrix}", True),
    (B("\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}"), "\\begin{pmatrix}1\\\\2\\end{pmatrix}", False),
    (B("(-3, 4)"), "(-3,4)", True),
    (B("(3, -4)"), "(-3,4)", False),
    (B("(2\\sqrt{2}, \\frac{\\pi}{4})"), "(\\sqrt{8}, \\frac{\\pi}{4})", True),
]

EQUATIONS = [
    (B("x=5"), "5", True),
    (B("5"), "x=5", True),
    (B("x = 5"), "x=5", True),
    (B("x=6"), "5", False),
    (B("y=2x+3"), "y=3+2x", True),
    (B("y = 2x + 3"), "2x+3", True),
    (B("y=2x-3"), "y=2x+3", False),
    (B("a=-\\frac{1}{2}"), "-\\frac12", True),
    (B("k = 4"), "4", True),
    (B("x^2+y^2=25"), "x^2+y^2=25", True),
    (B("y^2+x^2=25"), "x^2+y^2=25", True),
    (B("x^2+y^2=5"), "x^2+y^2=25", False),
    (B("n = 12"), "12", True),
    (B("n = 13"), "12", False),
    (B("f(x) = 2x"), "2x", True),
    (B("x=2, y=3"), "(2,3)", True),
    (B("p=\\frac12, q=\\frac13"), "(\\frac12,\\frac13)", True),
    (B("3<x"), "x>3", True),
]

UNITS_DEGREES = [
    (B("90^\\circ"), "90", True),
    (B("90^{\\circ}"), "90", True),
    (B("90"), "90^\\circ", True),
    (B("45^\\circ"), "90", False),
    (B("5 \\text{ cm}"), "5", True),
    (B("5\\text{cm}"), "5", True),
    (B("\\$18"), "18", True),
    (B("\\$18.00"), "18", True),
    (B("18 \\text{ dollars}"), "18", True),
    ("So she makes 18 dollars every day. The answer is 18 dollars.", "18", True),
    ("So she makes 19 dollars every day. The answer is 19 dollars.", "18", False),
    (B("12\\text{ inches}"), "12", True),
    (B("6 \\text{ cm}"), "5", False),
    (B("30 \\text{ minutes}"), "30", True),
    (B("120^\\circ"), "120^{\\circ}", True),
    (B("60^\\circ"), "120^\\circ", False),
    (B("90°"), "90", True),
    (B("\\frac{3}{4} \\text{ cup}"), "0.75", True),
    (B("5\\text{ m}^2"), "5", True),
    (B("\\$1,000"), "1000", True),
    (B("5 squared"), "5", False),
    (B("5 thousand"), "5", False),
    (B("5 m^2"), "5", True),
    (B("5 \\text{ (or 6)}"), "5", False),
    (B("5 \\text{ or more}"), "5", False),
    (B("\\text{about } 5"), "5", False),
    (B("5 \\text{ or } 6"), "5", False),
    (B("\\text{5 or 6}"), "5", False),
    (B("\\text{10 cm}"), "10", True),
    (B("1/2 \\text{ hours}"), "30 minutes", True),
]

TEXT_ANSWERS = [
    (B("\\text{Monday}"), "\\text{Monday}", True),
    (B("Monday"), "\\text{Monday}", True),
    (B("monday"), "Monday", True),
    (B("\\text{Tuesday}"), "\\text{Monday}", False),
    (B("yadnoM"), "Monday", False),
    (B("dayMon"), "Monday", False),
    (B("\\text{even}"), "\\text{even}", True),
    (B("\\text{odd}"), "\\text{even}", False),
    (B("\\text{Evelyn}"), "Evelyn", True),
    (B("\\textbf{Evelyn}"), "\\text{Evelyn}", True),
    ("<think>the day is fixed</think> <answer>The answer is Monday.</answer>", "Monday", True),
    (B("\\text{neither}"), "\\text{neither}", True),
    (B("five"), "5", True),
    (B("\\text{5}"), "5", True),
]

MULTIPLE_CHOICE = [
    (B("B"), "B", True),
    (B("(B)"), "B", True),
    (B("\\text{(B)}"), "B", True),
    (B("\\textbf{(B)}"), "(B)", True),
    (B("C"), "B", False),
    ("Comparing all options, the answer is (C).", "C", True),
    ("Comparing all options, the answer is (C).", "\\text{(C)}", True),
    (B("B) 42"), "B", True),
    (B("b"), "B", True),
    (B("42"), "B", False),
    (B("A, B"), "B", False),
    ("Answer: D", "D", True),
    (B("E"), "\\text{(E)}", True),
    (B("\\text{(A)}"), "\\text{(E)}", False),
    (B("\\text{B}"), "\\textbf{(B)}", True),
    (B("(B) or (C)"), "B", False),
    (B("B, C"), "B", False),
]

EXTRACTION = [
    ("<think>2+3=5</think> <answer>\\boxed{5}</answer>", "5", True),
    ("<think>2+3=5</think> <answer>5</answer>", "5", True),
    ("<think>maybe \\boxed{4}</think> <answer>\\boxed{5}</answer>", "5", True),
    ("<think>maybe \\boxed{5}</think> <answer>\\boxed{4}</answer>", "5", False),
    ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72", True),
    ("so the total is 1,234.\n#### 1,234", "1234", True),
    ("The final answer is $\\boxed{7}$. I hope it is correct.", "7", True),
    ("First \\boxed{3} and later \\boxed{4}", "4", True),
    ("First \\boxed{3} and later \\boxed{4}", "3", False),
    ("\\fbox{12}", "12", True),
    ("so we get \\boxed 7", "7", True),
    ("\\boxed{\\{1,2\\}}", "\\{1,2\\}", True),
    ("The answer is $\\frac{3}{4}$.", "0.75", True),
    ("Answer: 12", "12", True),
    ("The answer is 3.5 meters.", "3.5", True),
    ("So \\boxed{8} is right.\n\nFinal answer: \\boxed{9}", "9", True),
    ("Solution with gold as a full solution: \\boxed{6}", "so 2*3 = \\boxed{6}", True),
    ("4 + 4 = 8, done: \\boxed{8}", "Janet has 8 apples.\n#### 8", True),
    ("result \\boxed{\\frac{1}{2}", "\\frac12", False),  # unclosed box at the end: no answer
]

SIGNS_AND_NUMBERS = [
    (B("-3"), "-3", True),
    (B("- 3"), "-3", True),
    (B("3"), "-3", False),
    (B("-(-3)"), "3", True),
    (B("+3"), "3", True),
    (B("0"), "0", True),
    (B("0.0"), "0", True),
    (B("1000"), "1000.0", True),
    (B("7"), "7.5", False),
    (B("10^3"), "1000", True),
    (B("2^{100}"), "1267650600228229401496703205376", True),
    (B("2^{100}+1"), "1267650600228229401496703205376", False),
    (B("1267650600228229401496703205377"), "1267650600228229401496703205376", False),
    (B("100000000000000000001"), "100000000000000000000", False),
    (B("3.0000001"), "3", False),
    (B("2+3i"), "3i+2", True),
    (B("2-3i"), "2+3i", False),
    (B("\\infty"), "\\infty", True),
    (B("-\\infty"), "\\infty", False),
    (B("-0"), "0", True),
    (B("\\frac{9}{3}"), "3", True),
]

EMPTY_GARBAGE_HUGE = [
    ("", "5", False),
    ("   \n\t ", "5", False),
    ("\\boxed{}", "5", False),
    ("\\boxed{ }", "5", False),
    ("<answer></answer>", "5", False),
    ("\\boxed{\\frac{}{}}", "5", False),
    ("\\boxed{)(}", "5", False),
    ("\\boxed{\\frac{1}{0}}", "5", False),
    ("\\boxed{\\x\\y\\z}", "5", False),
    ("\\boxed{NaN}", "5", False),
    ("\\boxed{\\infty}", "5", False),
    ("\\boxed{5}", "", False),
    ("\\boxed{\\text{}}", "5", False),
    ("$$$$", "5", False),
    ("x" * 100_000, "5", False),
    ("\\boxed{5}" + " filler" * 15_000, "5", True),
    ("\\boxed{" + "9" * 500 + "}", "9" * 500, True),
    ("\\boxed{" + "9" * 500 + "}", "9" * 499 + "8", False),
    ("\\boxed{" + "{" * 10_000 + "5", "5", False),
    ("}" * 5000 + "\\boxed{5}" + "{" * 5000, "5", True),
    ("\\boxed{\\boxed{\\boxed{", "5", False),
    ("<answer>" * 1000 + "5", "5", False),
    ("The answer is " * 2000, "5", False),
    ("#### ", "5", False),
    ("\u0000\u0001\\boxed{5}\u0002", "5", True),
]

CASES = (
    FRACTIONS_DECIMALS_PERCENT
    + LATEX_FORMS
    + SETS_INTERVALS
    + TUPLES
    + EQUATIONS
    + UNITS_DEGREES
    + TEXT_ANSWERS
    + MULTIPLE_CHOICE
    + EXTRACTION
    + SIGNS_AND_NUMBERS
    + EMPTY_GARBAGE_HUGE
)

# (response, gold) -> why our verifier disagrees with the mathematical truth in CASES.
KNOWN_LIMITATIONS: dict[tuple[str, str], str] = {
    (B("e^{i\\pi}"), "-1"): "math-verify reads i as a symbol unless the gold looks complex",
    (B("\\sqrt{-1}"), "i"): "math-verify reads a bare i as a symbol, not the imaginary unit",
    (B("i"), "\\sqrt{-1}"): "math-verify reads a bare i as a symbol, not the imaginary unit",
    (B("\\tan 45^\\circ"), "1"): "degree marks are dropped (90^\\circ == 90), so trig of degrees is read in radians",
    (B("\\{x \\mid x > 0\\}"), "(0,\\infty)"): "set-builder notation is not parsed",
    (B("5 m^2"), "5"): "a single-letter unit without \\text{} cannot be told from a variable",
    (B("1/2 \\text{ hours}"), "30 minutes"): "no unit conversion",
}


def _case_id(i: int, case: tuple) -> str:
    gold = "".join(ch for ch in case[1][:16] if ch.isalnum() or ch in "+-.,()")
    return f"{i:03d}-{gold}-{case[2]}"


def _params():
    for i, (response, gold, expected) in enumerate(CASES):
        reason = KNOWN_LIMITATIONS.get((response, gold))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(response, gold, expected, id=_case_id(i, (response, gold, expected)), marks=marks)


def test_table_is_large_and_balanced():
    assert len(CASES) >= 150
    assert sum(1 for c in CASES if c[2]) >= 60 and sum(1 for c in CASES if not c[2]) >= 60
    assert all((r, g) in {(c[0], c[1]) for c in CASES} for r, g in KNOWN_LIMITATIONS)
    assert len({(c[0], c[1]) for c in CASES}) == len(CASES), "duplicate cases"


@pytest.mark.parametrize("response, gold, expected", list(_params()))
def test_verify_table(verifier, response, gold, expected):
    result = verifier.verify(response, gold)
    assert result.reason in ("correct", "wrong", "no_answer"), (result.reason, result.detail)
    assert result.correct is expected, (result.reason, result.extracted, result.detail)
    assert result.elapsed_s < verifier.timeout_s

"""Code verdicts: the three test formats, correct and wrong programs, and programs that cheat. Everything runs in
one parallel batch (module fixture); the verdict is decided in this process from plain values."""

from __future__ import annotations

import pytest

from reasonrl.rewards.code import (
    CodeRewardConfig,
    CodeVerdict,
    check_program,
    check_programs,
    code_metrics,
    extract_code,
    parse_tests,
    prompt_for_check,
    stdout_matches,
    values_equal,
)

CFG = CodeRewardConfig(test_timeout_s=2.0, max_timeout_s=4.0, workers=2)
STDIO = {"inputs": ["1 2\n", "20 22\n"], "outputs": ["3\n", "42\n"]}
CALL = {"fn_name": "add", "inputs": [[1, 2], [20, 22]], "outputs": [3, 42]}
CHECK = {
    "entry_point": "add",
    "check": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(20, 22) == 42\n",
}
GOOD = "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    print(add(*map(int, input().split())))\n"
CHEATS = {
    "always_equal": (
        "class Eq:\n    def __eq__(self, other): return True\n    def __ne__(self, other): return False\n"
        "    def __str__(self): return '3'\ndef add(a, b): return Eq()\n"
    ),
    "lying_int": (
        "class I(int):\n    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n"
        "def add(a, b): return I(0)\n"
    ),
    "exit_early": "import sys\nsys.exit(0)\n" + GOOD,
    "os_exit_early": "import os\nos._exit(0)\n" + GOOD,
    "frames": (  # looks for expected values in every frame and global it can reach, returns the first int
        "import gc, sys\ndef add(a, b):\n    seen = []\n    f = sys._getframe()\n    while f:\n"
        "        seen += [v for v in f.f_locals.values() if type(v) is int]\n        f = f.f_back\n"
        "    seen += [o for o in gc.get_objects() if isinstance(o, dict) and 'outputs' in o]\n"
        "    for o in seen:\n        if isinstance(o, dict):\n            return o['outputs'][0]\n    return -1\n"
    ),
    "patched_builtins": (
        "import builtins\nclass Fake(BaseException): pass\nbuiltins.AssertionError = Fake\n"
        "builtins.isinstance = lambda *a: True\nbuiltins.print = lambda *a, **k: None\ndef add(a, b): return 0\n"
    ),
    "exit_in_call": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "sys_exit_in_call": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
}


@pytest.fixture(scope="module")
def verdicts():
    programs = {"good": GOOD, "wrong": GOOD.replace("a + b", "a * b"), **CHEATS}
    pairs = [(p, t) for p in programs.values() for t in (STDIO, CALL, CHECK)]
    out = check_programs(pairs, config=CFG)
    return {
        name: dict(zip(("stdio", "call", "check"), out[3 * i : 3 * i + 3], strict=True))
        for i, name in enumerate(programs)
    }


@pytest.mark.parametrize("fmt", ["stdio", "call", "check"])
def test_correct_program_passes(verdicts, fmt):
    v = verdicts["good"][fmt]
    assert (v.status, v.passed, v.total) == ("passed", 1 if fmt == "check" else 2, 1 if fmt == "check" else 2), v


@pytest.mark.parametrize("fmt", ["stdio", "call", "check"])
def test_wrong_program_is_wrong(verdicts, fmt):
    v = verdicts["wrong"][fmt]
    assert v.status == "wrong" and v.passed == 0, v


@pytest.mark.parametrize("cheat", sorted(CHEATS))
@pytest.mark.parametrize("fmt", ["call", "check"])
def test_cheats_fail(verdicts, cheat, fmt):
    v = verdicts[cheat][fmt]
    assert v.status != "passed" and v.passed == 0, v


def test_cheat_statuses(verdicts):
    assert verdicts["always_equal"]["call"].status == "error"  # not a plain value: nothing to compare
    assert verdicts["lying_int"]["check"].status == "error"
    assert verdicts["exit_early"]["check"].status == "error"
    assert verdicts["os_exit_early"]["check"].status == "error"
    # the check runs in another process: the candidate's patched AssertionError and isinstance never reach it
    assert verdicts["patched_builtins"]["check"].status in ("wrong", "error")


def test_stdio_output_is_compared_by_lines_then_tokens():
    assert stdout_matches("3  \n\n", "3\n")
    assert stdout_matches("1 2\n3", "1\n2 3\n")
    assert not stdout_matches("3\n", "4\n")


def test_values_are_compared_with_exact_types():
    assert values_equal(3, 3) and values_equal(3.0, 3) and values_equal((1, [2]), [1, [2]])
    assert not values_equal(True, 1) and not values_equal(1, True) and not values_equal("3", 3)
    assert values_equal({"__dict__": [["a", 1]]}, {"a": 1}) and not values_equal({"__set__": [1]}, [1])


def test_call_style_accepts_wrapped_outputs_and_solution_classes():
    leet = "class Solution:\n    def add(self, a, b):\n        return [a + b, 0][:1][0]\n"
    wrapped = {"fn_name": "add", "inputs": [[1, 2]], "outputs": [[3]]}
    assert [v.status for v in check_programs([(leet, wrapped), (leet, CALL)], config=CFG)] == ["passed", "passed"]


def test_malformed_tests_and_fraction_reward():
    v = check_program(GOOD, {"inputs": ["1\n"]})
    assert v.status == "error" and v.total == 0
    half = CodeVerdict(1, 2, "wrong")
    assert half.reward("all") == 0.0 and half.reward("fraction") == 0.5
    assert check_program("print(3)\n", STDIO, config=CFG).reward("fraction") == 0.5


def test_check_tests_take_a_trusted_prompt():
    """``prompt`` (the task's prompt) runs before the check, so the check's helpers come from it; a non-str prompt
    is malformed. The program's own definitions of the same names never reach the check."""
    tests = dict(CHECK, check="def check(candidate):\n    assert candidate(1, 2) == twice(1.5)\n")
    tests["prompt"] = 'def twice(x):\n    return 2 * x\n\n\ndef add(a, b):\n    """a + b"""\n'
    assert parse_tests(tests).prompt == tests["prompt"] and parse_tests(CHECK).prompt is None
    with pytest.raises(ValueError, match="'prompt' must be a str"):
        parse_tests(dict(tests, prompt=["def twice(x): ..."]))
    # the prompt runs only when it has more than imports, docstrings and the entry point's stub
    assert prompt_for_check(tests["prompt"], "add") == tests["prompt"]
    stub_only = 'from typing import List\n\n\ndef add(a: List[int], b):\n    """a + b"""\n'
    assert prompt_for_check(stub_only, "add") is None and prompt_for_check(stub_only, "other") == stub_only
    assert prompt_for_check("FIX = 1\n", "add") == "FIX = 1\n" and prompt_for_check(None, "add") is None
    cheat = "def twice(x):\n    return 0\n\n\ndef add(a, b):\n    return 0\n"
    got = check_programs([(GOOD, tests), (cheat, tests), (GOOD + cheat.split("def add")[0], tests)], config=CFG)
    assert [v.status for v in got] == ["passed", "wrong", "passed"], got


def test_per_test_timeout_and_metrics():
    slow = "import time\na, b = map(int, input().split())\nif a > 5:\n    time.sleep(30)\nprint(a + b)\n"
    cfg = CodeRewardConfig(test_timeout_s=0.5, workers=2)
    v = check_program(slow, STDIO, config=cfg)
    assert (v.status, v.passed) == ("timeout", 1) and v.elapsed_s < 2.5, v
    m = code_metrics([v, CodeVerdict(2, 2, "passed")])
    assert m["reward/code_timeout"] == 1 and m["reward/code_passed"] == 1 and m["reward/code_killed"] == 0


def test_extract_code_takes_the_last_python_block():
    text = "Idea:\n```python\nprint(1)\n```\nbetter:\n```py\nprint(2)\n```\n```text\nnot code\n```\n"
    assert extract_code(text) == "print(2)\n"
    assert extract_code("print(3)") == "print(3)"
    assert extract_code("```python\nprint(4)\n") == "```python\nprint(4)\n"  # unclosed: the whole completion


def test_batch_deadline_counts_the_rest_as_timeout():
    cfg = CodeRewardConfig(test_timeout_s=3.0, batch_timeout_s=1.0, workers=1)
    hang = "while True:\n    pass\n"
    out = check_programs([(hang, STDIO), (GOOD, STDIO), (GOOD, STDIO)], config=cfg)
    assert [v.status for v in out] == ["timeout"] * 3
    assert "batch deadline" in out[2].detail

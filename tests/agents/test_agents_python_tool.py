"""The python tool runs programs in the real sandbox (a few starts, ~0.1-0.3 s each)."""

from __future__ import annotations

import pytest

from reasonrl.agents.python_tool import NO_OUTPUT, PythonTool, PythonToolError


@pytest.fixture(scope="module")
def tool():
    return PythonTool(timeout_s=1.0, max_output_chars=200)


def test_print_comes_back(tool):
    assert tool("print(4821 * 937)") == "4517277\n"


def test_no_output_says_so(tool):
    assert tool("x = 1") == NO_OUTPUT


def test_exception_is_an_error_with_the_programs_traceback(tool):
    with pytest.raises(PythonToolError, match="raised an error") as info:
        tool("def f():\n    return 1 / 0\nf()")
    text = str(info.value)
    assert "ZeroDivisionError" in text and 'prog.py", line 2, in f' in text
    assert "importlib" not in text  # the sandbox's own frames are dropped


def test_infinite_loop_times_out(tool):
    with pytest.raises(PythonToolError, match="did not finish within 1 s"):
        tool("while True:\n    pass")


def test_the_cpu_time_limit_reads_as_the_timeout(tool):
    """Under load the sandbox's CPU-time limit (SIGXCPU) can end a loop before the wall-clock deadline; the sandbox
    reports it as a timeout, so the model is told the same thing. (The program sends itself the signal: the race
    itself is not reproducible.)"""
    with pytest.raises(PythonToolError, match="did not finish within 1 s"):
        tool("import os, signal\nos.kill(os.getpid(), signal.SIGXCPU)")


def test_long_output_is_cut_in_the_middle(tool):
    out = tool("print('a' * 5000 + 'b' * 5000)")
    assert out.startswith("a") and out.rstrip().endswith("b") and "cut" in out and len(out) < 300


def test_empty_code_refused_without_a_sandbox():
    with pytest.raises(PythonToolError, match="empty"):
        PythonTool()("   ")

"""The calculator: exact arithmetic walked from the syntax tree, its limits and refusals, and no eval."""

from __future__ import annotations

import builtins
import time

import pytest

from reasonrl.agents.calculator import CalculatorError, calculate


@pytest.mark.parametrize(
    "expression, result",
    [
        ("4821 * 937", "4517277"),
        ("9999 * 9999", "99980001"),
        ("123456789 * 987654321", "121932631112635269"),
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("-2 ** 2", "-4"),
        ("2 ** -2", "0.25"),
        ("-(3 - 10)", "7"),
        ("10 // 3", "3"),
        ("-7 % 3", "2"),
        ("8 / 2", "4"),
        ("7 / 4", "1.75"),
        ("1 / 3", "0.3333333333333333"),
        ("0.1 + 0.2", "0.3"),
        ("1.5 * 2", "3"),
        ("2.5e-3 * 4", "0.01"),
        ("1_000 + 1", "1001"),
        ("2 ** 0.5", "1.4142135623730951"),
        ("2 ** 100", str(2**100)),
        ("  12*34\n", "408"),
    ],
)
def test_values(expression, result):
    assert calculate(expression) == result


@pytest.mark.parametrize(
    "expression, message",
    [
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("5 // 0.0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("x + 1", "Name is not allowed"),
        ("().__class__", "not allowed"),
        ("__import__('os').system('true')", "Call is not allowed"),
        ("abs(-1)", "Call is not allowed"),
        ("'a' * 3", "only numbers"),
        ("1 < 2", "Compare is not allowed"),
        ("[1, 2]", "List is not allowed"),
        ("lambda: 1", "Lambda is not allowed"),
        ("2 ^ 3", "use '**'"),
        ("2 ** 101", "exponent 101 is too large"),
        ("9 ** 100 ** 2", "too large"),
        ("(10 ** 100) ** 40 * 10 ** 100", "more than 4000 digits"),
        ("99999999999999999999999 ** 100 * 99999999999999999999999 ** 100", "more than 4000 digits"),
        ("(-8) ** (1/3)", "not a real number"),
        ("1e999", "out of range"),
        ("1 +", "not an arithmetic expression"),
        ("", "empty expression"),
        ("1+" * 600 + "1", "longer than 1000"),
        ("-" * 999 + "1", "nested too deeply"),
        ("(" * 300 + "1" + ")" * 300, "not an arithmetic expression"),
    ],
)
def test_refusals(expression, message):
    with pytest.raises(CalculatorError, match=message.replace("(", r"\(").replace("*", r"\*")):
        calculate(expression)


def test_not_a_string():
    with pytest.raises(CalculatorError, match="must be a string"):
        calculate(12)  # type: ignore[arg-type]


def test_huge_power_refused_before_it_is_computed():
    start = time.perf_counter()
    with pytest.raises(CalculatorError):
        calculate("(10 ** 99) ** 100")
    assert time.perf_counter() - start < 0.5


def test_no_eval_or_exec_and_compile_only_builds_a_tree(monkeypatch):
    import ast

    def refuse(*args, **kwargs):
        raise AssertionError("eval/exec called")

    real_compile = builtins.compile
    flags_seen = []

    def spy_compile(source, filename, mode, flags=0, *args, **kwargs):
        flags_seen.append(flags)
        return real_compile(source, filename, mode, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    monkeypatch.setattr(builtins, "compile", spy_compile)
    assert calculate("4821 * 937") == "4517277"
    with pytest.raises(CalculatorError):
        calculate("__import__('os').getpid()")
    assert flags_seen and all(f & ast.PyCF_ONLY_AST for f in flags_seen)

"""The ``calculator`` tool: exact arithmetic on an expression string, walked from its syntax tree (no ``eval``).

    calculate("4821 * 937")      -> "4517277"
    calculate("7 / 4")           -> "1.75"       (exact: a terminating decimal)
    calculate("1 / 3")           -> "0.3333333333333333"   (not exact: a float)
    calculate("0.1 + 0.2")       -> "0.3"
    calculate("2 ** 0.5")        -> "1.4142135623730951"

Grammar: ``+ - * / // % **``, unary ``+``/``-``, parentheses, integer and decimal literals (``1_000``, ``2.5``,
``1e3``). Numbers are exact: integers stay integers and decimals are fractions (``0.1`` is 1/10), so ``+ - * / // %``
and ``**`` with an integer exponent are exact; a non-integer exponent makes the result a float. A result that is an
integer prints as one; a fraction prints as its exact decimal when it has one, else as a float.

Refused (:class:`CalculatorError`, a :class:`~reasonrl.agents.tool_calls.ToolError`): anything else in the tree
(names, calls, attributes, strings, comparisons, ``^``), expressions over ``MAX_EXPRESSION_CHARS``, ``**`` with an
exponent above ``MAX_EXPONENT`` in absolute value, any intermediate result over ``MAX_DIGITS`` digits (checked
before it is computed for ``*`` and ``**``), division or modulo by zero, non-finite or complex results.
"""

from __future__ import annotations

import ast
import math
from fractions import Fraction

from reasonrl.agents.tool_calls import ToolError

MAX_EXPRESSION_CHARS = 1000
MAX_EXPONENT = 100
MAX_DIGITS = 4000
_MAX_BITS = int(MAX_DIGITS * math.log2(10)) + 8  # cheap size bound checked before a big multiplication or power
_LIMIT = 10**MAX_DIGITS

Number = int | Fraction | float
_BINARY = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}


class CalculatorError(ToolError):
    """The expression is not one the calculator evaluates; the message says why."""


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly and return the result as text (see the module docstring).

    Args:
        expression: the arithmetic expression, e.g. "4821 * 937" or "(2.5 + 3) / 4"
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    text = expression.strip()
    if not text:
        raise CalculatorError("empty expression")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise CalculatorError(f"not an arithmetic expression: {detail}") from None
    except (RecursionError, MemoryError):
        raise CalculatorError("expression nested too deeply") from None
    try:
        return _format(_eval(tree.body))
    except RecursionError:
        raise CalculatorError("expression nested too deeply") from None


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, got {value!r}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise CalculatorError("number out of range")
            return _normal(Fraction(repr(value)))  # the literal's shortest decimal: 0.1 is exactly 1/10
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _eval(node.operand)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _binary(type(node.op), _eval(node.left), _eval(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitXor):
        raise CalculatorError("'^' is not a power here: use '**'")
    raise CalculatorError(f"{type(node).__name__} is not allowed: only numbers, + - * / // % ** and parentheses")


def _binary(op: type, a: Number, b: Number) -> Number:
    if op is ast.Pow:
        return _power(a, b)
    if op in (ast.Div, ast.FloorDiv, ast.Mod) and b == 0:
        raise CalculatorError("division by zero")
    if op is ast.Mult and _bits(a) + _bits(b) > 2 * _MAX_BITS:
        raise CalculatorError(f"result has more than {MAX_DIGITS} digits")
    if isinstance(a, float) or isinstance(b, float):
        a, b = float(a), float(b)
    elif op is ast.Div:
        a = Fraction(a)
    result = {
        ast.Add: lambda: a + b,
        ast.Sub: lambda: a - b,
        ast.Mult: lambda: a * b,
        ast.Div: lambda: a / b,
        ast.FloorDiv: lambda: a // b,
        ast.Mod: lambda: a % b,
    }[op]()
    return _checked(result)


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {_format(exponent)} is too large (at most {MAX_EXPONENT} in absolute value)")
    if isinstance(exponent, int) and not isinstance(base, float):
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        if _bits(base) * abs(exponent) > 2 * _MAX_BITS:
            raise CalculatorError(f"result has more than {MAX_DIGITS} digits")
        return _checked(Fraction(base) ** exponent)
    try:
        result = float(base) ** float(exponent)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result out of range") from None
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return _checked(result)


def _bits(x: Number) -> int:
    if isinstance(x, float):
        return 0  # floats cannot grow past their range; _checked catches infinities
    if isinstance(x, Fraction):
        return max(x.numerator.bit_length(), x.denominator.bit_length())
    return x.bit_length()


def _normal(x: Fraction) -> Number:
    return x.numerator if x.denominator == 1 else x


def _checked(x: Number) -> Number:
    if isinstance(x, float):
        if not math.isfinite(x):
            raise CalculatorError("result out of range")
        return x
    if isinstance(x, Fraction):
        if abs(x.numerator) >= _LIMIT or x.denominator >= _LIMIT:
            raise CalculatorError(f"result has more than {MAX_DIGITS} digits")
        return _normal(x)
    if abs(x) >= _LIMIT:
        raise CalculatorError(f"result has more than {MAX_DIGITS} digits")
    return x


def _format(x: Number) -> str:
    if isinstance(x, float):
        return str(int(x)) if x.is_integer() and abs(x) < 1e16 else repr(x)
    if isinstance(x, int):
        return str(x)
    den = x.denominator
    twos = fives = 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1 or max(twos, fives) > 30:  # no short exact decimal: the nearest float
        return repr(float(x))
    places = max(twos, fives)
    scaled = abs(x.numerator) * (10**places // x.denominator)
    digits = str(scaled).rjust(places + 1, "0")
    sign = "-" if x < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}".rstrip("0").rstrip(".")

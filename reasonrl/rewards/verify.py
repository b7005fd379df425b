"""Answer verification: a pure function from (response, gold) to a ``VerifyResult``.

``verify_response`` extracts the final answer (``extract.py``), then decides equality in this order::

    1. cleaned strings equal                       -> correct
    2. gold is a multiple-choice letter            -> compare letters
    3. gold is a text answer (\\text{Monday})       -> compare normalised words
    4. both are plain numbers (72, 1,234, 3/4)     -> exact rational comparison (a GSM8K-style fast path)
    5. otherwise math-verify: both sides parsed from LaTeX to sympy, then ``math_verify.verify``

Safety: only math-verify's LaTeX parser (ANTLR -> sympy objects) sees the text. Its ``ExprExtractionConfig``
path is never used because it feeds text to sympy's ``parse_expr``, i.e. to ``eval``. The LaTeX path still turns
number tokens into sympy numbers through ``sympy.Number(str)`` -> ``parse_expr``; in the verification workers
``eval_guard.install_eval_guard`` makes ``parse_expr`` refuse anything from outside sympy that is not a plain
number literal (tested by spying on ``eval``/``exec`` over the whole truth table). Numbers whose size
estimate exceeds ``max_number_digits`` digits (``10^{10^{10}}``, ``1000000!``) are rejected before any
evaluation. This module has no timeout of its own: math-verify's signal timeouts are off (they fail outside
the main thread), and the hard bound is the worker-process kill in ``pool.py``. Call it through
``RewardVerifier``, not directly on untrusted text in a process you care about.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from reasonrl.rewards.extract import extract_answer, extract_choice
from reasonrl.rewards.normalize import (
    choice_letter,
    clean_latex,
    gold_answer,
    hedged,
    normalize_text,
    number_candidates,
    text_answer,
)

REASONS = ("correct", "wrong", "no_answer", "timeout", "error")

logging.getLogger("math_verify").setLevel(logging.ERROR)  # it warns once that its own timeout is disabled
logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)


@dataclass
class VerifyResult:
    """Outcome of checking one response against one gold answer.

    ``reason`` is one of ``correct`` / ``wrong`` / ``no_answer`` (nothing extractable) / ``timeout`` (the worker
    was killed after the hard timeout) / ``error`` (an exception or a crashed worker; ``detail`` says which).
    ``extracted`` is the answer string taken from the response; ``elapsed_s`` the wall time spent on it.
    """

    correct: bool
    reason: str
    extracted: str | None = None
    elapsed_s: float = 0.0
    detail: str | None = None


@dataclass(frozen=True)
class VerifyConfig:
    """Knobs of ``verify_response``.

    Attributes:
        extract_mode: see ``extract.EXTRACT_MODES`` (``auto``, ``orz``, ``answer_tag``, ``boxed``, ``gsm8k``,
            ``answer_is``).
        max_answer_chars: extracted answers longer than this are ``wrong`` without parsing (real final answers
            are short; long ones are how a policy probes the verifier).
        max_number_digits: numbers estimated to have more decimal digits than this are ``wrong`` without
            evaluation, unless the answer is literally the gold string (None: no guard; the hard timeout remains).
        float_rounding, numeric_precision: passed to ``math_verify.verify`` (numbers equal after rounding to
            ``float_rounding`` decimals count as equal).
        allow_set_relation_comp: let an interval gold match an equivalent inequality (``(-\\infty,3]`` vs
            ``x \\le 3``); the set of solutions is the same.
    """

    extract_mode: str = "auto"
    max_answer_chars: int = 1000
    max_number_digits: int | None = 100_000
    float_rounding: int = 6
    numeric_precision: int = 15
    allow_set_relation_comp: bool = True


DEFAULT_CONFIG = VerifyConfig()


@lru_cache(maxsize=1)
def _math_verify():
    import math_verify  # heavy import (sympy, ANTLR): done once per process, lazily

    return math_verify


@lru_cache(maxsize=16384)
def parse_latex(s: str) -> tuple:
    """math-verify's LaTeX parse of one answer string (cached): a tuple of sympy objects and/or strings.

    Only ``LatexExtractionConfig`` is used (an ANTLR grammar producing sympy objects; no ``eval``).
    """
    mv = _math_verify()
    return tuple(mv.parse(f"${s}$", extraction_config=[mv.LatexExtractionConfig()], parsing_timeout=None))


def digits_bound(expr, _depth: int = 0) -> float:
    """Upper bound on log10 |value| of a numeric sympy expression, computed without evaluating it.

    Rules: integer n -> log10 n; p/q -> max; a*b -> sum; a+b -> max + log10(#terms); a^b -> log10|a| * 10^bound(b);
    n! -> n log10 n; sets/tuples/functions -> max over arguments; symbols -> 0. Returns ``inf`` for towers.
    """
    if _depth > 200:
        return math.inf
    if getattr(expr, "is_Integer", False):
        return int(expr).bit_length() * 0.30103
    if getattr(expr, "is_Rational", False):
        return max(int(expr.p).bit_length(), int(expr.q).bit_length()) * 0.30103
    args = getattr(expr, "args", ())
    if not args:
        return 0.0
    name = type(expr).__name__
    if name == "Pow" and len(args) == 2:
        base, exponent = (digits_bound(a, _depth + 1) for a in args)
        if exponent > 15:
            return math.inf
        return max(base, 1.0) * 10**exponent
    if name in ("factorial", "factorial2", "subfactorial", "gamma"):
        n = digits_bound(args[0], _depth + 1)
        if n > 15:
            return math.inf
        return 10**n * max(n, 1.0)
    bounds = [digits_bound(a, _depth + 1) for a in args]
    if name == "Mul":
        return sum(bounds)
    if name == "Add":
        return max(bounds) + math.log10(len(bounds))
    return max(bounds)


def _too_large(parsed: tuple, limit: int) -> bool:
    return any(not isinstance(p, str) and digits_bound(p) > limit for p in parsed)


def _prepare_for_parse(s: str) -> str:
    s = clean_latex(s)
    # a bare "%" starts a LaTeX comment; an answer's "10%" means percent
    return s.replace("\\%", "%").replace("%", "\\%")


def answers_match(pred: str, gold: str, config: VerifyConfig = DEFAULT_CONFIG) -> tuple[bool, str | None]:
    """Decide whether an extracted answer equals a gold answer. Returns ``(equal, detail)``.

    ``detail`` names the rule that decided (``string``, ``choice``, ``text``, ``number``, ``math_verify``) or why
    the answer was refused (``too_long``, ``hedged``, ``too_large``, ``unparsable``).
    """
    if len(pred) > config.max_answer_chars:
        return False, "too_long"
    p, g = clean_latex(pred), clean_latex(gold)
    if not p:
        return False, "empty"
    if p == g:
        return True, "string"
    letter = choice_letter(g)
    if letter is not None:
        return extract_choice(p) == letter, "choice"
    words = text_answer(g)
    if words is not None:
        return normalize_text(p) == words, "text"
    if hedged(p):
        return False, "hedged"
    g_vals = number_candidates(g)
    if g_vals is not None:
        p_vals = number_candidates(p)
        if p_vals is not None:
            if set(g_vals) & set(p_vals):
                return True, "number"
            if all(_is_decimal(v) for v in (*g_vals, *p_vals)):  # exact finite decimals: no rounding question
                return False, "number"
    return _math_verify_equal(p, g, config)


def _is_decimal(x: Fraction) -> bool:
    """True if x has a finite decimal expansion (denominator of the form 2^a 5^b)."""
    d = x.denominator
    for f in (2, 5):
        while d % f == 0:
            d //= f
    return d == 1


def _math_verify_equal(pred: str, gold: str, config: VerifyConfig) -> tuple[bool, str | None]:
    g_parsed = parse_latex(_prepare_for_parse(gold))
    p_parsed = parse_latex(_prepare_for_parse(pred))
    if not p_parsed:
        return False, "unparsable"
    limit = config.max_number_digits
    if limit is not None and (_too_large(p_parsed, limit) or _too_large(g_parsed, limit)):
        return False, "too_large"
    mv = _math_verify()
    equal = mv.verify(
        list(g_parsed),
        list(p_parsed),
        float_rounding=config.float_rounding,
        numeric_precision=config.numeric_precision,
        allow_set_relation_comp=config.allow_set_relation_comp,
        timeout_seconds=None,
    )
    return bool(equal), "math_verify"


def verify_response(response: str, gold: str, config: VerifyConfig = DEFAULT_CONFIG) -> VerifyResult:
    """Extract the answer from ``response`` and compare it with ``gold`` (see the module docstring).

    ``gold`` may be a bare answer (``72``, ``\\frac{3}{4}``) or a full solution (its last ``\\boxed{}`` or
    ``#### n`` is used). Never raises for bad input text: exceptions become ``reason="error"``.
    """
    start = time.perf_counter()
    extracted = None
    try:
        if not isinstance(response, str) or not isinstance(gold, str):
            raise TypeError(f"response and gold must be str, got {type(response).__name__}, {type(gold).__name__}")
        extracted = extract_answer(response, config.extract_mode).answer
        if extracted is None or not extracted.strip():
            return VerifyResult(False, "no_answer", None, time.perf_counter() - start)
        equal, detail = answers_match(extracted, gold_answer(gold), config)
        reason = "correct" if equal else "wrong"
        return VerifyResult(equal, reason, extracted, time.perf_counter() - start, detail)
    except (Exception, RecursionError) as exc:  # noqa: BLE001 - untrusted input must never raise
        detail = f"{type(exc).__name__}: {str(exc)[:200]}"
        return VerifyResult(False, "error", extracted, time.perf_counter() - start, detail)


def verify_item(item: tuple) -> VerifyResult:
    """Pool task: ``item = (response, gold, config)``. Top-level so that worker processes can unpickle it."""
    response, gold, config = item
    return verify_response(response, gold, config)


_WARMUP = [
    ("\\boxed{\\frac{1}{2}}", "0.5"),
    ("\\boxed{x^2+1}", "1+x^2"),
    ("\\boxed{x=5}", "5"),
    ("\\boxed{\\{1,2\\}}", "\\{2,1\\}"),
    ("\\boxed{[1,2)}", "(-\\infty, 3]"),
    ("\\boxed{x \\le 3}", "(3,\\infty)"),
    ("\\boxed{(1,\\sqrt{2})}", "(1,2)"),
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("\\boxed{5\\text{ cm}}", "5 \\text{ m}"),
    ("\\boxed{10\\%}", "0.1"),
    ("\\boxed{\\sin(\\pi/6) + \\log_2 8 + 3! + \\binom{4}{2}}", "\\frac{37}{2}"),
    ("\\boxed{2+3i}", "\\infty"),
    ("\\boxed{\\emptyset \\cup \\mathbb{R}}", "y=2x+1"),
]


def warmup() -> None:
    """Import math-verify and exercise its main paths once, so lazy imports and first-call costs happen now."""
    for response, gold in _WARMUP:
        verify_response(response, gold)


def worker_init() -> None:
    """Initializer of verification workers: warm up, then install the eval guard (``eval_guard.py``)."""
    from reasonrl.rewards.eval_guard import install_eval_guard

    warmup()
    install_eval_guard()

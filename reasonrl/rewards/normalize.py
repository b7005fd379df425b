"""String normalisation of extracted answers before comparison (pure string work, no evaluation).

Three kinds of answers get exact, cheap treatment before math-verify is consulted:

* plain numbers (``72``, ``-3.50``, ``1,234``, ``\\frac{3}{4}``, ``3/4``): compared exactly as fractions;
* multiple-choice letters (gold ``B`` or ``(B)``): compared as letters;
* text answers (gold ``\\text{Monday}``, ``even``): compared case-insensitively after removing markup.

Everything else (expressions, sets, intervals, tuples, equations) goes to math-verify after ``clean_latex``.
"""

from __future__ import annotations

import re
from fractions import Fraction

from reasonrl.rewards.extract import extract_choice, gsm8k_answer, last_boxed

# Word units and filler a numeric answer may carry ("18 dollars", "5 cm", "12 apples"); function-like words are
# excluded so that "2 sqrt 3" or "3 pi" are never read as plain numbers.
_NOT_UNITS = {
    *"sqrt pi sin cos tan cot sec csc log ln exp mod and or i e".split(),
    *"squared cubed factorial percent hundred thousand million billion trillion dozen half times".split(),
}

_UNICODE_MATH = str.maketrans(
    {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot "}
)
_SPACING = re.compile(r"(?<!\\)\\[,;:! ]|\\q?quad\b|~")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*")
_FRAC_VARIANTS = re.compile(r"\\[dt]frac(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|°|\\degree(?![A-Za-z])")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_THOUSANDS_BRACE = re.compile(r"(?<=\d)\{,\}(?=\d{3})")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}([, \u2009\u202f])\d{3}(?:\1\d{3})*(?:\.\d+)?")
_REPEATING = re.compile(r"([+-]?)(\d*)\.(\d*)\\overline\{(\d+)\}")
_PERCENT = re.compile(r"(.+?)\s*\\?%")
_NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100}
_SIMPLE_FRAC = re.compile(r"([+-]?)\\frac\{([+-]?\d+)\}\{([+-]?\d+)\}")
_SHORT_FRAC = re.compile(r"([+-]?)\\frac(\d)(\d)")
_SLASH_FRAC = re.compile(r"([+-]?\d+)\s*/\s*([+-]?\d+)")
_UNIT_TAIL = re.compile(r"([A-Za-z]+\.?\s*)+")
_TEXT_ANSWER = re.compile(r"[A-Za-z][A-Za-z '\-]*[A-Za-z]")


def strip_math_delimiters(s: str) -> str:
    """Remove surrounding ``$``/``$$``, ``\\(\\)``, ``\\[\\]``, unescaped ``$`` inside, and trailing punctuation."""
    s = s.strip()
    for left, right in (("\\[", "\\]"), ("\\(", "\\)")):
        if s.startswith(left) and s.endswith(right):
            s = s[len(left) : -len(right)].strip()
    s = re.sub(r"(?<!\\)\$", "", s).strip()
    while s and s[-1] in ".;," and not s.endswith("\\,"):
        s = s[:-1].rstrip()
    return s


def clean_latex(s: str) -> str:
    """Light LaTeX clean-up that never changes the value: delimiters, spacing commands, ``\\left``/``\\right``,
    ``\\dfrac``/``\\tfrac`` -> ``\\frac``, degree marks, ``1{,}000`` -> ``1000``, ``\\$`` and ``\\displaystyle``.
    """
    s = strip_math_delimiters(s.translate(_UNICODE_MATH))
    s = s.replace("\\displaystyle", "").replace("\\$", "").replace("\\%", "%")
    s = _SPACING.sub(" ", s)
    s = _LEFT_RIGHT.sub("", s)
    s = _FRAC_VARIANTS.sub(r"\\frac", s)
    s = _DEGREES.sub("", s)
    s = _THOUSANDS_BRACE.sub("", s)
    return s.strip()


def gold_answer(gold: str) -> str:
    """Reduce a gold field to its final answer: a full MATH solution gives its last ``\\boxed{}`` content, a
    GSM8K solution its ``#### n`` value; anything else is returned stripped."""
    if "\\boxed" in gold or "\\fbox" in gold:
        boxed = last_boxed(gold)
        if boxed is not None:
            return boxed
    if "####" in gold:
        found = gsm8k_answer(gold)
        if found is not None:
            return found
    return gold.strip()


def unwrap_text(s: str) -> str:
    """Replace ``\\text{...}`` (and ``\\mathrm``/``\\textbf``/``\\mbox``...) wrappers by their content."""
    prev = None
    while prev != s:
        prev = s
        s = _TEXT_WRAP.sub(r"\1", s)
    return s


def parse_number(s: str) -> Fraction | None:
    """Exact value of a plain number string, or None when ``s`` is anything else.

    Accepted: integers and decimals with optional sign, thousands separators in groups of three (``1,234.5``,
    ``1 000`` as left by ``1\\,000``), repeating decimals (``0.1\\overline{6}``), ``a/b`` and ``\\frac{a}{b}`` /
    ``\\frac ab`` with integer a, b (b != 0). Percentages are handled by ``number_candidates``.
    """
    s = s.strip()
    if not s or len(s) > 64:
        return None
    s = re.sub(r"^([+-])\s+", r"\1", s)
    if _THOUSANDS.fullmatch(s):
        s = re.sub(r"[, \u2009\u202f]", "", s)
    if _NUMBER.fullmatch(s):
        return Fraction(s)
    m = _REPEATING.fullmatch(s)
    if m is not None:
        sign, whole, fixed, rep = m.groups()
        value = Fraction(int(whole + fixed + rep) - int(whole + fixed or "0"), 10 ** len(fixed) * (10 ** len(rep) - 1))
        return -value if sign == "-" else value
    for pattern in (_SIMPLE_FRAC, _SHORT_FRAC):
        m = pattern.fullmatch(s)
        if m is not None:
            num, den = int(m.group(2)), int(m.group(3))
            if den == 0:
                return None
            value = Fraction(num, den)
            return -value if m.group(1) == "-" else value
    m = _SLASH_FRAC.fullmatch(s)
    if m is not None and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2)))
    return None


def number_with_units(s: str) -> Fraction | None:
    """Value of ``<number> <unit words>`` such as ``18 dollars``, ``5 cm``, ``12 apples.`` (None otherwise).

    The unit part must be plain words of two or more letters; function names (``sqrt``, ``pi``, ``log``...) are
    never units, so ``2 sqrt 3`` is not read as 2.
    """
    s = unwrap_text(s).strip()
    if s.lower() in _NUMBER_WORDS:
        return Fraction(_NUMBER_WORDS[s.lower()])
    whole = parse_number(s)
    if whole is not None:
        return whole
    m = re.match(r"[+-]?[\d.,]+", s)
    if m is None or m.end() == len(s):
        return None
    value = parse_number(m.group(0))
    tail = s[m.end() :]
    if value is None or not tail[:1].isspace() or not _UNIT_TAIL.fullmatch(tail.strip()):
        return None
    words = re.findall(r"[A-Za-z]+", tail)
    if any(len(w) < 2 or w.lower() in _NOT_UNITS for w in words):
        return None
    return value


def number_candidates(s: str) -> tuple[Fraction, ...] | None:
    """Values a numeric answer may stand for: ``(v,)`` for a number (units allowed, see ``number_with_units``),
    ``(v, v/100)`` for ``v%`` (a percent answer to a "what percent" question is often given as v or as v%), or
    None when ``s`` is not numeric."""
    m = _PERCENT.fullmatch(s.strip())
    if m is not None:
        value = parse_number(m.group(1))
        return None if value is None else (value, value / 100)
    value = number_with_units(s)
    return None if value is None else (value,)


_TEXT_CONTENT = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox)\s*\{([^{}]*)\}")
_QUALIFIER = re.compile(
    r"(?i)\b(?:or|and)\s+(?:more|less|fewer|greater|smaller|higher|lower)\b|\b(?:at\s+(?:least|most)|more\s+than|"
    r"less\s+than|fewer\s+than|approx\w*|about|around|roughly|nearly|almost|maybe|perhaps|either|possibly)\b"
)


def hedged(answer: str) -> bool:
    """True when ``\\text{...}`` inside a math answer carries numbers or qualifiers (``5 \\text{ (or 6)}``,
    ``5 \\text{ or more}``, ``\\text{about } 5``): math-verify drops text as units, which would accept a hedge."""
    for text in _TEXT_CONTENT.findall(answer):
        if _QUALIFIER.search(text):
            return True
        if re.search(r"\d", text) and number_with_units(text) is None:  # "\\text{5}", "\\text{10 cm}" are fine
            return True
    return False


def choice_letter(gold: str) -> str | None:
    """The letter when a gold answer is a multiple-choice letter (``B``, ``(B)``, ``\\text{(B)}``), else None."""
    s = clean_latex(gold)
    if len(s) > 16:
        return None
    letter = extract_choice(s)
    if letter is None:
        return None
    bare = re.sub(r"[\s(){}.:]|\\text(?:bf)?", "", s)
    return letter if bare == letter else None  # upper case only: a gold "i" or "e" is a number, not a choice


def text_answer(gold: str) -> str | None:
    """Normalised words when a gold answer is a text answer (``\\text{Monday}``, ``even``, ``Evelyn``), else None.

    A gold counts as text when, after unwrapping ``\\text{}``, it is letters, spaces, apostrophes and hyphens
    only, and either was wrapped in ``\\text{}`` or contains a word of three or more letters (so ``x`` or ``ab``
    stay algebra). Normalisation: lower case, single spaces, a leading article removed.
    """
    s = clean_latex(gold)
    wrapped = bool(_TEXT_WRAP.search(s))
    s = unwrap_text(s).strip()
    if not _TEXT_ANSWER.fullmatch(s) or "\\" in s:
        return None
    if not wrapped and not re.search(r"[A-Za-z]{3,}", s):
        return None
    return normalize_text(s)


def normalize_text(s: str) -> str:
    """Lower case, markup and punctuation removed, whitespace collapsed, leading "the/a/an" dropped."""
    s = unwrap_text(clean_latex(s)).lower()
    s = re.sub(r"[^a-z0-9' \-]", " ", s)
    s = " ".join(s.split())
    return re.sub(r"^(?:the|a|an) ", "", s)

"""Answer extraction from untrusted model output: linear-time string scanning, no regex backtracking traps.

Every function here takes arbitrary text (100 kB strings, 10k nested braces, unbalanced markup) and returns
in time linear in its length. They never evaluate anything; they only cut substrings out.

Supported answer formats (``extract_answer`` modes):

* ``"boxed"``: the content of the last *complete* ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces matched,
  ``\\{``/``\\}`` are literal braces and do not count). ``\\boxed 5`` (no braces) is accepted too.
* ``"answer_tag"``: ORZ's ``<answer> ... </answer>``; inside it, a ``\\boxed{}`` wins, otherwise "the answer is"
  or the whole (short) content.
* ``"orz"``: Open-Reasoner-Zero's strict rule: a ``\\boxed{}`` *inside* the last closed answer tag, else nothing.
* ``"gsm8k"``: the last ``#### <answer>`` line.
* ``"answer_is"``: the text after the last "final answer is" / "the answer is" / "answer:".
* ``"auto"`` (default): answer tag, then last boxed anywhere, then ``####``, then "the answer is".

A last-number fallback is deliberately not offered: it rewards guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

EXTRACT_MODES = ("auto", "orz", "answer_tag", "boxed", "gsm8k", "answer_is")

# Longest answer substring we return for the free-text modes ("the answer is ..." and untagged answer content).
MAX_FREE_ANSWER_CHARS = 300

_BOX_CMD = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_IS = re.compile(r"(?i)(?:final\s+answer\s*(?:is|:)|the\s+answer\s+is|\banswer\s*:)")
_GSM8K = re.compile(r"####")
_CHOICE_LETTERS = "ABCDEFGHIJ"
_OTHER_CHOICE = re.compile(r"(?:\(|\b(?:or|and)\s+|[,;/&]\s*)\s*\(?[A-J]\b(?!\w)")
_CHOICE_RE = re.compile(
    r"^\s*(?:\\text(?:bf)?\{\s*)?(?:option\s+|choice\s+)?\(?\s*([A-J])\s*\)?(?:\s*\})?\s*(?:[.):]\s*.*)?$",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True)
class Extraction:
    """An extracted answer string and how it was found (``method`` is one of the mode names)."""

    answer: str | None
    method: str | None = None


def match_braces(text: str) -> dict[int, int]:
    """Map the index of every grouping ``{`` to the index of its matching ``}`` (one linear pass, no recursion).

    A backslash escapes the next character, so ``\\{`` and ``\\}`` (LaTeX literal braces) are not grouping
    braces, while ``\\\\{`` (a line break followed by a group) is. Unmatched braces are simply absent.
    """
    pairs: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            stack.append(i)
        elif c == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` or ``\\fbox{...}`` in ``text`` (None if there is none).

    ``\\boxed 5`` (argument without braces, a single token) is returned as ``"5"``. An unclosed box at the end
    (a truncated response) is skipped in favour of the previous complete one.
    """
    starts = [m.end() for m in _BOX_CMD.finditer(text)]
    if not starts:
        return None
    pairs: dict[int, int] | None = None
    for pos in reversed(starts):
        j = pos
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            if pairs is None:
                pairs = match_braces(text)
            end = pairs.get(j)
            if end is not None:
                return text[j + 1 : end].strip()
        elif j > pos and j < len(text):  # "\boxed 5": one space-separated token
            k = j
            while k < len(text) and not text[k].isspace() and text[k] not in "$}":
                k += 1
            if k > j:
                return text[j:k].rstrip(".,;")
    return None


def answer_tag_content(text: str, require_closed: bool = True) -> str | None:
    """Content of the last ``<answer> ... </answer>`` block (None if there is none).

    With ``require_closed=False`` an opening tag without a closing one yields the rest of the text.
    """
    end = text.rfind("</answer>")
    if end != -1:
        start = text.rfind("<answer>", 0, end)
        if start != -1:
            return text[start + len("<answer>") : end].strip()
    if not require_closed:
        start = text.rfind("<answer>")
        if start != -1:
            return text[start + len("<answer>") :].strip()
    return None


def gsm8k_answer(text: str) -> str | None:
    """The text after the last ``####`` up to the end of its line, thousands commas removed (None if absent)."""
    last = None
    for m in _GSM8K.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() :]
    line = rest.split("\n", 1)[0].strip().lstrip("#").strip()
    line = re.sub(r"(?<=\d),(?=\d{3}\b)", "", line)
    return line.rstrip(".") or None


def answer_is(text: str) -> str | None:
    """The phrase after the last "final answer is" / "the answer is" / "answer:" (None if absent).

    The phrase ends at a newline, at a sentence-ending period followed by a space, or after
    ``MAX_FREE_ANSWER_CHARS`` characters; surrounding ``$`` and a trailing period are removed. A ``\\boxed{}``
    inside the phrase wins.
    """
    last = None
    for m in _ANSWER_IS.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() : last.end() + 4 * MAX_FREE_ANSWER_CHARS]
    boxed = last_boxed(rest)
    if boxed is not None:
        return boxed
    phrase = rest.split("\n", 1)[0]
    lead = phrase.lstrip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if lead.startswith(left):  # "is $3.5$. I hope ..." -> the math span only
            end = lead.find(right, len(left))
            while end != -1 and right == "$" and lead[end - 1] == "\\":
                end = lead.find(right, end + 1)
            if end != -1:
                return lead[len(left) : end].strip()[:MAX_FREE_ANSWER_CHARS] or None
            break
    dollars = phrase.count("$") - phrase.count("\\$")
    if dollars < 2:  # a period inside inline math ($3.5$) is not a sentence end
        cut = re.search(r"\.(?:\s|$)", phrase)
        if cut is not None:
            phrase = phrase[: cut.start()]
    phrase = phrase.strip().rstrip(".").strip()
    if len(phrase) > MAX_FREE_ANSWER_CHARS:
        phrase = phrase[:MAX_FREE_ANSWER_CHARS]
    return phrase or None


def _from_answer_tag(content: str) -> str | None:
    boxed = last_boxed(content)
    if boxed is not None:
        return boxed
    said = answer_is(content)
    if said is not None:
        return said
    content = content.strip()
    if not content or len(content) > MAX_FREE_ANSWER_CHARS:
        return None
    return content


def extract_answer(text: str, mode: str = "auto") -> Extraction:
    """Extract the final answer from a model response (see the module docstring for the modes).

    Returns ``Extraction(answer=None)`` when the response holds no answer in the requested format.
    """
    if not isinstance(text, str):
        raise TypeError(f"response must be str, got {type(text).__name__}")
    if mode not in EXTRACT_MODES:
        raise ValueError(f"unknown extract mode {mode!r}; expected one of {EXTRACT_MODES}")
    if mode == "boxed":
        return Extraction(last_boxed(text), "boxed")
    if mode == "gsm8k":
        return Extraction(gsm8k_answer(text), "gsm8k")
    if mode == "answer_is":
        return Extraction(answer_is(text), "answer_is")
    tag = answer_tag_content(text)
    if mode == "orz":
        return Extraction(last_boxed(tag) if tag is not None else None, "orz")
    if mode == "answer_tag":
        return Extraction(_from_answer_tag(tag) if tag is not None else None, "answer_tag")
    # auto
    if tag is not None:
        found = _from_answer_tag(tag)
        if found is not None:
            return Extraction(found, "answer_tag")
    for method, fn in (("boxed", last_boxed), ("gsm8k", gsm8k_answer), ("answer_is", answer_is)):
        found = fn(text)
        if found is not None:
            return Extraction(found, method)
    return Extraction(None, None)


def extract_choice(answer: str) -> str | None:
    """The multiple-choice letter (A-J, upper case) an answer string names, or None.

    Accepts ``B``, ``(B)``, ``B)``, ``B.``, ``\\text{B}``, ``\\textbf{(B)}``, ``B: 42``, ``Option B``. A bare
    lower-case letter only counts when it is the whole answer.
    """
    s = answer.strip().strip("$").strip()
    if len(s) > MAX_FREE_ANSWER_CHARS:
        return None
    m = _CHOICE_RE.match(s)
    if m is None:
        return None
    letter = m.group(1)
    if letter.islower() and len(s) != 1:
        return None
    if _OTHER_CHOICE.search(s[m.end(1) :]):  # "(B) or (C)", "B), C)": hedging over several options
        return None
    letter = letter.upper()
    return letter if letter in _CHOICE_LETTERS else None

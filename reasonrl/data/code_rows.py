"""Code rows: a prompt with unit tests instead of a gold answer (the loader's part; the verdicts are
:mod:`reasonrl.rewards.code`'s).

A record is a code row when it has a ``tests`` field (or the field ``fields={"tests": ...}`` maps, a key or a dotted
path such as ``input_output`` or ``reward_model.ground_truth``) or ``data_source == "code"``. Its tests are
parsed once, at load time, into a dict in one of the formats of :func:`reasonrl.rewards.code.parse_tests`:

* stdin/stdout ``{"inputs": [...], "outputs": [...]}``, call style ``{"fn_name": ..., "inputs": [[args]], ...}``,
  HumanEval style ``{"entry_point": ..., "check": "def check(candidate): ..."}``: a dict, or its JSON text (APPS and
  TACO's ``input_output``, verl-style ``reward_model.ground_truth``);
* a list of ``{"input": ..., "output": ...}`` test cases (DeepCoder's ``tests`` for PrimeIntellect and
  LiveCodeBench rows), converted to the stdin/stdout format; cases with ``"testtype": "functional"`` and a
  ``metadata.func_name`` (or an ``fn_name``) become call style, each input's lines read as one JSON argument each.

Anything else is malformed (:class:`ValueError` naming what is wrong), so the loader refuses it before training.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The data_source values the trainer routes (reasonrl.rewards.routing.ROUTES, which data/ cannot import; a test keeps
# the two in step): a code row with one of them keeps it, any other label (verl's and Skywork-OR1's dataset names,
# e.g. "taco", "train-code-taco-hard") becomes "code" and is kept in ``data_source_label``.
ROUTE_NAMES = ("math", "exact_match", "gym", "user", "code", "remote")
CODE = "code"


def is_route_name(value: Any) -> bool:
    return isinstance(value, str) and (value in ROUTE_NAMES or (value.startswith("gym:") and len(value) > 4))


def _functional_args(text: Any, i: int) -> list:
    if not isinstance(text, str):
        raise ValueError(f"test case {i}: a functional test's input must be text (one JSON value per line)")
    try:
        return [json.loads(line) for line in text.split("\n") if line.strip()]
    except json.JSONDecodeError as exc:
        raise ValueError(f"test case {i}: a functional test's input line is not JSON ({exc.msg})") from None


def _from_cases(cases: list) -> dict:
    """``[{"input", "output", ...}, ...]`` -> stdin/stdout or call-style tests."""
    if not cases:
        raise ValueError("tests is an empty list")
    for i, case in enumerate(cases):
        if not isinstance(case, dict) or "input" not in case or "output" not in case:
            what = sorted(case) if isinstance(case, dict) else type(case).__name__
            raise ValueError(f"test case {i} is not an {{'input', 'output'}} object (it has {what})")
    first = cases[0]
    metadata = first.get("metadata")
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            metadata = None
    fn_name = first.get("fn_name") or (metadata.get("func_name") if isinstance(metadata, dict) else None)
    if first.get("testtype") == "functional" or (fn_name and first.get("testtype") is None):
        if not fn_name:
            raise ValueError("functional test cases without a function name (metadata.func_name or fn_name)")
        outputs = []
        for i, case in enumerate(cases):
            out = case["output"]
            try:
                outputs.append(json.loads(out) if isinstance(out, str) else out)
            except json.JSONDecodeError:
                raise ValueError(f"test case {i}: a functional test's output is not JSON") from None
        inputs = [_functional_args(case["input"], i) for i, case in enumerate(cases)]
        return {"fn_name": str(fn_name), "inputs": inputs, "outputs": outputs}
    return {"inputs": [case["input"] for case in cases], "outputs": [case["output"] for case in cases]}


def normalize_tests(value: Any) -> dict:
    """The tests of a code row as a dict that :func:`parse_tests` accepts; ``ValueError`` saying what is wrong."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("tests is empty")
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"tests is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if isinstance(value, list):
        value = _from_cases(value)
    if not isinstance(value, dict):
        raise ValueError(f"tests must be an object (or its JSON text), got {type(value).__name__}")
    from reasonrl.rewards.code import parse_tests  # imports the sandbox package: only for code rows

    try:
        parse_tests(value)
    except (ValueError, TypeError) as exc:
        keys = ", ".join(map(repr, sorted(map(str, value))))
        raise ValueError(f"{exc} (it has keys {keys})") from None
    return value


def tests_fingerprint(tests: dict) -> str:
    """A short stable text of ``tests``, for duplicate detection of code rows without a reference answer."""
    text = json.dumps(tests, sort_keys=True, ensure_ascii=False, default=str)
    return "tests:" + hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()[:16]

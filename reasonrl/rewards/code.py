"""Code rewards: run a program against its tests in the sandbox (``reasonrl.sandbox``) and decide the verdict here,
in the trusted parent, from plain values the sandbox serialised.

    from reasonrl.rewards.code import check_program, check_programs, extract_code

    verdict = check_program("print(sum(map(int, input().split())))", {"inputs": ["1 2\\n"], "outputs": ["3\\n"]})
    verdict.passed, verdict.total, verdict.status          # 1, 1, "passed"
    verdicts = check_programs([(program, tests), ...])      # parallel, same order

Test formats (``tests`` is a dict or its JSON text):

* stdin/stdout (APPS, TACO, DeepCoder, Skywork-OR1): ``{"inputs": [stdin, ...], "outputs": [stdout, ...]}``. Outputs
  match when their lines, each stripped of trailing whitespace, are equal once leading and trailing blank lines are
  dropped, or else when their whitespace-separated tokens are equal (APPS's fallback). A list of lines as an input
  or output is joined with newlines.
* call style: ``{"fn_name": name, "inputs": [[arg, ...], ...], "outputs": [value, ...]}``: the program's function
  (or method of a ``Solution`` class, LeetCode style) is called with each argument list. The return value matches
  when it equals the expected value with exact types (a bool is not an int; ints and floats compare as numbers,
  floats within 1e-9; tuples compare as lists, since JSON has none), or when the expected value is a one-element
  list and the return value matches its element (APPS/TACO wrap outputs so).
* HumanEval style: ``{"entry_point": name, "check": "def check(candidate): ..."}``, optionally with ``"prompt"``: the
  task's prompt, trusted text run before the check for the helpers some checks call (HumanEval's ``poly``,
  ``encode_cyclic``, ``encode_shift``). One test, passed when ``check`` returns. The check runs in the sandbox, in a
  process of its own whose names come from the prompt and the check only (never from the program: a program that
  defines ``abs`` or ``poly`` changes nothing there); it gets a proxy of the entry point as ``candidate``, which calls
  the program in another process and only ever returns plain values (see docs/rewards_and_data.md for what remains
  possible).

Expected outputs of the first two formats never enter the sandbox. ``status`` is ``passed`` only when every test
passes; otherwise it is the status of the first test that did not pass: ``wrong`` (ran, wrong output), ``error``
(an exception, a non-zero exit, a return value that is not a plain value, a malformed test), ``timeout`` (over the
per-test or per-program time limit) or ``killed`` (by a limit: memory, output size, CPU, a signal such as a
segfault).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from reasonrl.sandbox import Job, RunResult, Sandbox, SandboxLimits

CODE_STATUSES = ("passed", "wrong", "error", "timeout", "killed")
REWARD_MODES = ("all", "fraction")


@dataclass(frozen=True)
class CodeRewardConfig:
    """Options of the code reward.

    Attributes:
        reward: ``all`` (1 only when every test passes, as Skywork-OR1) or ``fraction`` (passed / total).
        test_timeout_s: wall-clock (and CPU) limit of one test.
        max_timeout_s: cap of the default per-program limit, ``test_timeout_s * tests + 1``.
        batch_timeout_s: limit of a whole ``check_programs`` call; programs not done by then are ``timeout``.
        memory_mb, nproc, output_bytes, nofile: per-process limits (``reasonrl.sandbox.SandboxLimits``).
        isolate: ``auto`` / ``ns`` / ``none`` (``SandboxLimits.isolate``).
        workers: programs run at once (default: CPU count).
    """

    reward: str = "all"
    test_timeout_s: float = 4.0
    max_timeout_s: float = 30.0
    batch_timeout_s: float | None = None
    memory_mb: int = 512
    nproc: int = 16
    output_bytes: int = 1 << 20
    nofile: int = 64
    isolate: str = "auto"
    workers: int | None = None

    def __post_init__(self):
        if self.reward not in REWARD_MODES:
            raise ValueError(f"reward must be one of {REWARD_MODES}, got {self.reward!r}")


@dataclass
class CodeVerdict:
    """``passed`` of ``total`` tests; ``status`` in ``CODE_STATUSES``; ``detail`` says why a test failed."""

    passed: int
    total: int
    status: str
    detail: str = ""
    elapsed_s: float = 0.0
    isolated: bool | None = None

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def reward(self, mode: str = "all") -> float:
        if mode == "fraction":
            return self.fraction
        return 1.0 if self.status == "passed" else 0.0


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code(completion: str) -> str:
    """The program of a completion: the last fenced block tagged ``python``/``py``/``python3`` (or untagged) that
    is closed; the whole completion when there is none."""
    blocks = [body for lang, body in _FENCE.findall(completion) if lang.lower() in ("", "python", "py", "python3")]
    return blocks[-1] if blocks else completion


# -- tests -------------------------------------------------------------------------------------------------------


@dataclass
class _Parsed:
    mode: str
    inputs: list
    expected: list
    fn_name: str | None = None
    check: str | None = None
    entry_point: str | None = None
    prompt: str | None = None


@lru_cache(maxsize=4096)
def prompt_for_check(prompt: str | None, entry_point: str) -> str | None:
    """The part of a HumanEval-style ``prompt`` the sandbox runs before the check: the whole prompt when it has
    anything besides imports, docstrings and the entry point's stub (a helper such as ``poly``, a constant), else
    ``None`` (those give a check nothing to call; not running them saves importing ``typing`` in every check)."""
    if not prompt:
        return None
    try:
        body = ast.parse(prompt).body
    except SyntaxError:
        return prompt  # the check's process reports it
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            continue
        return prompt
    return None


def _text(x: Any) -> str:
    return "\n".join(map(str, x)) if isinstance(x, list) else str(x)


def parse_tests(tests: Any) -> _Parsed:
    """The format of ``tests`` (module docstring); ``ValueError`` when it is none of them."""
    if isinstance(tests, (str, bytes)):
        tests = json.loads(tests)
    if not isinstance(tests, dict):
        raise ValueError(f"tests must be a dict, got {type(tests).__name__}")
    if "check" in tests:
        if not isinstance(tests.get("entry_point"), str) or not isinstance(tests["check"], str):
            raise ValueError("HumanEval-style tests need a str 'check' and a str 'entry_point'")
        prompt = tests.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError("HumanEval-style tests' 'prompt' must be a str (the task's prompt) when given")
        return _Parsed("check", [None], [None], check=tests["check"], entry_point=tests["entry_point"], prompt=prompt)
    inputs, outputs = tests.get("inputs"), tests.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise ValueError("tests need non-empty 'inputs' and 'outputs' lists of the same length")
    fn_name = tests.get("fn_name")
    if fn_name:
        if not all(isinstance(args, list) for args in inputs):
            raise ValueError("call-style inputs must be argument lists")
        return _Parsed("call", inputs, outputs, fn_name=str(fn_name))
    return _Parsed("stdio", [_text(x) for x in inputs], [_text(x) for x in outputs])


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def stdout_matches(got: str, expected: str) -> bool:
    return _lines(got) == _lines(expected) or got.split() == expected.split()


def _decode(x: Any) -> Any:
    """The sandbox's tagged JSON as plain values; ``ValueError`` for anything it cannot have written."""
    if isinstance(x, list):
        return [_decode(v) for v in x]
    if isinstance(x, dict):
        if len(x) != 1:
            raise ValueError("untagged object")
        (tag, v), *_ = x.items()
        if tag == "__t":
            return tuple(_decode(e) for e in v)
        if tag == "__s":
            return {"__set__": [_decode(e) for e in v]}
        if tag == "__d":
            return {"__dict__": [[_decode(k), _decode(e)] for k, e in v]}
        if tag == "__b":
            return {"__bytes__": v}
        if tag == "__f":
            return float(v)
        raise ValueError(f"unknown tag {tag!r}")
    return x


def values_equal(got: Any, expected: Any) -> bool:
    """Exact-type equality of plain values (bool is not int; int/float as numbers; tuples as lists)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return type(got) is bool and type(expected) is bool and got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, float) or isinstance(got, float):
            return math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9) or (got != got and expected != expected)
        return got == expected
    if isinstance(got, tuple):
        got = list(got)
    if type(expected) is list and type(got) is list:
        return len(got) == len(expected) and all(values_equal(g, e) for g, e in zip(got, expected, strict=True))
    if type(expected) is dict and type(got) is dict and "__dict__" in got:
        pairs = got["__dict__"]
        if not all(type(k) is str for k, _ in pairs) or len(pairs) != len(expected):
            return False
        return all(k in expected and values_equal(v, expected[k]) for k, v in pairs)
    return type(got) is type(expected) and type(got) in (str, type(None)) and got == expected


def call_matches(got: Any, expected: Any) -> bool:
    if values_equal(got, expected):
        return True
    return type(expected) is list and len(expected) == 1 and values_equal(got, expected[0])


# -- verdicts ----------------------------------------------------------------------------------------------------


def _verdict(parsed: _Parsed, run: RunResult) -> CodeVerdict:
    total = len(parsed.inputs)
    by_index = {t.get("i"): t for t in run.tests if isinstance(t.get("i"), int)}
    passed, first_status, first_detail = 0, None, ""
    for i in range(total):
        test = by_index.get(i)
        status, detail = "passed", ""
        if test is None:
            status = {"timeout": "timeout", "killed": "killed"}.get(run.status, "error")
            detail = run.detail or "the test did not run"
        elif test.get("s") == "ok":
            status, detail = _compare(parsed, i, test)
        else:
            status = test.get("s") if test.get("s") in CODE_STATUSES else "error"
            detail = (test.get("sig") or "") + " " + str(test.get("e", ""))[-300:]
        if status == "passed":
            passed += 1
        elif first_status is None:
            first_status, first_detail = status, f"test {i}: {detail.strip()}"
    return CodeVerdict(passed, total, first_status or "passed", first_detail, run.elapsed_s, run.isolated)


def _compare(parsed: _Parsed, i: int, test: dict) -> tuple[str, str]:
    if parsed.mode == "check":
        return "passed", ""
    out = test.get("o")
    if not isinstance(out, str):
        return "error", "no output"
    if parsed.mode == "stdio":
        return ("passed", "") if stdout_matches(out, parsed.expected[i]) else ("wrong", f"output {out[:100]!r}")
    try:
        got = _decode(json.loads(out))
    except ValueError as exc:  # includes an integer too long for int(): not a value we compare
        return "error", f"unreadable return value: {exc}"
    if call_matches(got, parsed.expected[i]):
        return "passed", ""
    return "wrong", f"returned {out[:100]}"


def _limits(parsed: _Parsed, cfg: CodeRewardConfig, timeout_s: float | None) -> SandboxLimits:
    program_s = timeout_s or min(cfg.test_timeout_s * len(parsed.inputs) + 1.0, cfg.max_timeout_s)
    return SandboxLimits(
        timeout_s=program_s,
        test_timeout_s=min(cfg.test_timeout_s, program_s),
        memory_mb=cfg.memory_mb,
        nproc=cfg.nproc,
        output_bytes=cfg.output_bytes,
        nofile=cfg.nofile,
        isolate=cfg.isolate,
    )


def check_programs(
    pairs: Sequence[tuple[str, Any]],
    timeout_s: float | None = None,
    *,
    config: CodeRewardConfig | None = None,
    sandbox: Sandbox | None = None,
) -> list[CodeVerdict]:
    """Verdicts of ``(program, tests)`` pairs, run in parallel, returned in order.

    ``timeout_s``: per-program limit (default ``test_timeout_s * tests + 1``, at most ``max_timeout_s``). A
    malformed ``tests`` gives an ``error`` verdict with ``total`` 0; it never raises for a bad program or test.
    A pair repeated in the batch (the same program text and tests: GRPO samples of a confident policy often are)
    runs once and every copy gets that verdict, so a program that depends on chance or time is judged once per
    batch."""
    cfg = config or CodeRewardConfig()
    box = sandbox or Sandbox(workers=cfg.workers)
    verdicts: list[CodeVerdict | None] = [None] * len(pairs)
    jobs, parsed_of, index = [], [], []
    first_of: dict[tuple[str, str], int] = {}  # (program, tests) -> the index that runs it
    copies: list[tuple[int, int]] = []  # (index, index of the same pair that runs)
    for i, (program, tests) in enumerate(pairs):
        key = _pair_key(program, tests)
        if key is not None and key in first_of:
            copies.append((i, first_of[key]))
            continue
        if key is not None:
            first_of[key] = i
        try:
            parsed = parse_tests(tests)
        except (ValueError, TypeError) as exc:
            verdicts[i] = CodeVerdict(0, 0, "error", f"malformed tests: {exc}")
            continue
        if not isinstance(program, str):
            verdicts[i] = CodeVerdict(0, len(parsed.inputs), "error", "the program is not a str")
            continue
        job = Job(
            program,
            parsed.mode,
            inputs=parsed.inputs if parsed.mode != "check" else [None],
            fn_name=parsed.fn_name,
            check=parsed.check,
            entry_point=parsed.entry_point,
            prompt=prompt_for_check(parsed.prompt, parsed.entry_point) if parsed.mode == "check" else None,
            limits=_limits(parsed, cfg, timeout_s),
        )
        jobs.append(job)
        parsed_of.append(parsed)
        index.append(i)
    runs = box.run_many(jobs, deadline_s=cfg.batch_timeout_s)
    for i, parsed, run in zip(index, parsed_of, runs, strict=True):
        verdicts[i] = _verdict(parsed, run)
    for i, source in copies:
        verdicts[i] = replace(verdicts[source])  # type: ignore[type-var]
    return verdicts  # type: ignore[return-value]


def _pair_key(program: Any, tests: Any) -> tuple[str, str] | None:
    """The identity of a ``(program, tests)`` pair within one batch (``None``: not a str program or not JSON)."""
    if not isinstance(program, str):
        return None
    try:
        return program, tests if isinstance(tests, str) else json.dumps(tests, sort_keys=True)
    except (TypeError, ValueError):
        return None


def check_program(
    program: str, tests: Any, timeout_s: float | None = None, *, config: CodeRewardConfig | None = None
) -> CodeVerdict:
    """The verdict of one program (``check_programs`` of one pair)."""
    return check_programs([(program, tests)], timeout_s, config=config)[0]


def code_metrics(verdicts: Sequence[CodeVerdict]) -> dict[str, float]:
    """``reward/code_<status>`` counts of a batch (every status, zeros included) and the passed-test fraction."""
    counts = Counter(v.status for v in verdicts)
    out = {f"reward/code_{s}": float(counts.get(s, 0)) for s in CODE_STATUSES}
    out["reward/code_test_pass_frac"] = sum(v.fraction for v in verdicts) / max(len(verdicts), 1)
    return out


def with_config(cfg: CodeRewardConfig, **changes: Any) -> CodeRewardConfig:
    return replace(cfg, **changes)

"""Untrusted text never reaches eval/exec: run the whole truth table (plus hostile strings) the way a verification
worker does, with builtins.eval/exec spied on, and check that only sympy's own number-literal code is evaluated.

Runs in a subprocess so the guard and the spies never touch the test session's sympy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("test_rewards_verify_table.py")

SCRIPT = r"""
import builtins, importlib.util, json, re, sys
from reasonrl.rewards.verify import verify_response, worker_init

worker_init()  # what every RewardVerifier worker runs before taking work
import sympy
try:
    sympy.sympify("__import__('os').getpid()")
    guard = "open"
except Exception as exc:  # the guard refuses non-numeric text
    guard = "refused" if "refused" in str(exc) or "refused" in repr(exc.__cause__ or exc.__context__) else repr(exc)
assert sympy.sympify("2.5") == sympy.Float("2.5")
spec = importlib.util.spec_from_file_location("table", sys.argv[1])
table = importlib.util.module_from_spec(spec)
spec.loader.exec_module(table)

calls = []
real_eval, real_exec = builtins.eval, builtins.exec
import os, sympy
SYMPY = os.path.dirname(sympy.__file__) + os.sep
PLUMBING = ("core/sympify.py", "core/numbers.py", "core/cache.py", "core/decorators.py", "parsing/")

def origin():
    # the code that handed the text to sympy's evaluator: first frame that is not sympy plumbing
    frame = sys._getframe(3)  # skip origin(), record() and the spy lambda
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(SYMPY) and any(p in name[len(SYMPY):] for p in PLUMBING)):
            return name
        frame = frame.f_back
    return "?"

def record(kind, src):
    calls.append((kind, src if isinstance(src, str) else "<code object>", origin().startswith(SYMPY)))
builtins.eval = lambda src, *a, **k: (record("eval", src), real_eval(src, *a, **k))[1]
builtins.exec = lambda src, *a, **k: (record("exec", src), real_exec(src, *a, **k))[1]

hostile = [
    "\\boxed{__import__('os').system('echo pwned')}",
    "\\boxed{x.__class__.__mro__}",
    "The answer is eval('1+1')",
    "\\boxed{\\text{exec(open('/etc/passwd').read())}}",
    "\\boxed{lambda: 1}",
    "\\boxed{1e5}",
]
results = [verify_response(r, g) for r, g, _ in table.CASES] + [verify_response(h, "2") for h in hostile]
builtins.eval, builtins.exec = real_eval, real_exec

# Allowed: text that sympy itself supplies (its own literals such as S('3/2') in lazily built tables, its
# generated monomial helpers), parse_expr's "from sympy import *" set-up, code objects (module imports), and
# number literals. Anything else coming from outside sympy (math-verify, latex2sympy, reasonrl) is a failure.
number_code = re.compile(r"(?:Integer|Float|Rational) \(\s*'?[0-9.eE+-]+'?\s*\)")
def allowed(kind, src, sympy_origin):
    if sympy_origin or src in ("from sympy import *", "<code object>"):
        return True
    return kind == "eval" and bool(number_code.fullmatch(src))
bad = [c for c in calls if not allowed(*c)]
mismatches = [
    [r.reason, r.detail, g[:40]]
    for (resp, g, expected), r in zip(table.CASES, results)
    if r.correct is not expected and (resp, g) not in table.KNOWN_LIMITATIONS
]
print(json.dumps({"guard": guard, "calls": len(calls), "bad": bad[:20], "mismatches": mismatches,
                  "errors": [r.detail for r in results if r.reason == "error"],
                  "hostile": [r.correct for r in results[-len(hostile):]]}))
"""


def test_no_untrusted_text_reaches_eval():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(TABLE)], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["guard"] == "refused"
    assert report["bad"] == [], report["bad"]
    assert report["mismatches"] == [], "the eval guard changed verification results"
    assert report["errors"] == []
    assert report["hostile"] == [False] * 6

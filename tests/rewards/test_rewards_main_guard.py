"""A script without ``if __name__ == "__main__":`` that creates a reward pool: its worker processes re-run it
(forkserver and spawn both re-import the main module), stop at once instead of starting pools of their own, and
the parent raises ``UnguardedMainError`` naming the script and the fix. The same script with the guard works.

Each case runs a small script in a fresh interpreter and counts how often the script ran through a file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest

from reasonrl.rewards.main_guard import EXIT_UNGUARDED_MAIN, UnguardedMainError, main_module, reimporting_main
from reasonrl.rewards.pool import _raise_for_startup_failure

POOL = """
from reasonrl.rewards.pool import TimeoutPool, sleep_task
with TimeoutPool(num_workers=2, timeout_s=5.0, preload=(), start_method="{method}") as pool:
    print("results:", [o.status for o in pool.map(sleep_task, [0.0, 0.0])])
"""
COUNT = 'import os\nwith open(os.environ["RUNS_FILE"], "a") as f:\n    f.write(f"{os.getpid()}\\n")\n'


def run_script(tmp_path, body: str, as_module: bool) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``body`` as ``python unguarded.py`` or ``python -m unguarded``; returns the result and the run count."""
    (tmp_path / "unguarded.py").write_text(body)
    runs = tmp_path / "runs.txt"
    args = ["-m", "unguarded"] if as_module else [str(tmp_path / "unguarded.py")]
    out = subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env={**os.environ, "RUNS_FILE": str(runs)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out, len(runs.read_text().split()) if runs.exists() else 0


@pytest.mark.parametrize(
    "method,as_module",
    [("forkserver", False), ("spawn", False), ("forkserver", True)],
    ids=["forkserver", "spawn", "-m"],
)
def test_an_unguarded_script_fails_fast_and_says_why(tmp_path, method, as_module):
    out, runs = run_script(tmp_path, COUNT + POOL.format(method=method), as_module)
    assert out.returncode == 1 and "results:" not in out.stdout
    last = out.stderr.strip().splitlines()[-1]
    main = "module unguarded" if as_module else f"script {tmp_path / 'unguarded.py'}"
    assert last.startswith(
        f"reasonrl.rewards.main_guard.UnguardedMainError: reward worker processes cannot start: "
        f"they re-run the {main}, which starts work at import time."
    ), out.stderr[-3000:]
    assert 'under `if __name__ == "__main__":`, because' in last and "runs the main module again" in last
    assert "calls TimeoutPool() at import time" in out.stderr  # the workers' own message
    assert "bootstrapping phase" not in out.stderr  # they stopped before the standard library's generic error
    assert runs <= 3  # the parent, then each of the 2 workers once, which exit without starting anything


def test_the_guarded_script_runs_once(tmp_path):
    body = "if __name__ == '__main__':\n" + textwrap.indent(COUNT + POOL.format(method="forkserver"), "    ")
    out, runs = run_script(tmp_path, body, as_module=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "results: ['ok', 'ok']" in out.stdout and runs == 1


def test_what_children_re_run():
    script = types.ModuleType("__main__")
    script.__spec__, script.__file__ = None, "train.py"
    assert main_module(script) == f"script {os.path.abspath('train.py')}"
    module = types.ModuleType("__main__")
    module.__spec__ = types.SimpleNamespace(name="playground.my_recipe")
    assert main_module(module) == "module playground.my_recipe"
    package = types.ModuleType("__main__")
    package.__spec__ = types.SimpleNamespace(name="reasonrl.sft.__main__")  # python -m reasonrl.sft: not re-run
    assert main_module(package) is None
    notebook = types.ModuleType("__main__")  # a notebook or python -c: no file, no spec
    notebook.__spec__ = None
    assert main_module(notebook) is None
    assert not reimporting_main()  # this process is not a child re-running its main module


def test_the_parent_names_the_cause_of_a_startup_death():
    with pytest.raises(UnguardedMainError, match=r'cannot start: .* `if __name__ == "__main__":`'):
        _raise_for_startup_failure(EXIT_UNGUARDED_MAIN, failures=1)  # at once, not after three tries
    _raise_for_startup_failure(1, failures=2)  # other deaths: the worker is replaced, twice
    with pytest.raises(RuntimeError, match=r"die during start-up \(exit code 1\); is the initializer or preload"):
        _raise_for_startup_failure(1, failures=3)

"""The ``if __name__ == "__main__":`` guard that scripts starting worker processes need, detected and explained.

With the ``forkserver`` and ``spawn`` start methods (the reward pool uses them, never ``fork``), Python's
``multiprocessing`` runs the parent's main module again in every child before the child starts its work (as
``__mp_main__``, so that functions defined there can be unpickled). A script with no guard therefore starts its
work again in every worker: it builds another reward pool, or starts another Ray cluster and training run.

Python 3.11 offers no supported way to stop a child from re-running the main module: the fork server's
``'__main__'`` preload never receives the script's path, and the path sent with every start request is re-run
unconditionally. So the failure is made fast and clear instead:

* in a child that is still re-running the main module, :func:`exit_if_reimporting_main` (called at the top of
  ``TimeoutPool()`` and ``BasePPOExp.run()``) prints why and exits at once with :data:`EXIT_UNGUARDED_MAIN`;
* the parent's pool sees that exit code and raises :class:`UnguardedMainError`, naming the script.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys

# The exit status of a child that found itself re-running an unguarded main module (sysexits' EX_CONFIG).
EXIT_UNGUARDED_MAIN = 78

_WHY = (
    "with the 'forkserver' and 'spawn' start methods Python's multiprocessing runs the main module again in "
    "every worker process it starts, so code at the top level of the script runs once more in each worker"
)


class UnguardedMainError(RuntimeError):
    """Worker processes could not start because the main module starts work at import time (no guard)."""


def main_module(module=None) -> str | None:
    """What child processes re-run (``module``, default ``sys.modules["__main__"]``): ``"script <path>"`` or
    ``"module <name>"``; None when nothing is re-run (an interactive session or a notebook, ``python -c``, a
    package's ``__main__.py``)."""
    module = sys.modules.get("__main__") if module is None else module
    name = getattr(getattr(module, "__spec__", None), "name", None)
    if name is not None:
        return None if name == "__main__" or name.endswith(".__main__") else f"module {name}"
    path = getattr(module, "__file__", None)
    return f"script {os.path.abspath(path)}" if path else None


def reimporting_main() -> bool:
    """True while this process is a multiprocessing child that is still re-running its parent's main module.

    This is the flag the standard library's own check reads (``multiprocessing.spawn._check_not_importing_main``);
    it is set only between the child's start and the end of that re-import.
    """
    return bool(getattr(mp.current_process(), "_inheriting", False))


def guard_advice(problem: str) -> str:
    """``problem`` followed by the fix and the reason (shared by the child's exit message and the parent's error)."""
    return (
        f"{problem}. Put the code that starts training (or creates a reward pool) under "
        f'`if __name__ == "__main__":`, because {_WHY}. A notebook needs no guard.'
    )


def exit_if_reimporting_main(what: str) -> None:
    """Exit this process with :data:`EXIT_UNGUARDED_MAIN` if it is a child re-running an unguarded main module.

    ``what`` names the caller (e.g. ``"BasePPOExp.run()"``). Call it first thing, before any expensive work: the
    child must not start a second training run or pool, and its parent turns the exit status into
    :class:`UnguardedMainError`. ``os._exit`` is used because only it keeps the status through the fork
    server, which reports any exception raised here as status 1.
    """
    if not reimporting_main():
        return
    main = main_module(sys.modules.get("__mp_main__")) or "main module"  # the module being re-run
    problem = f"worker process {os.getpid()} is re-running the {main}, which calls {what} at import time"
    print(f"reasonrl: {guard_advice(problem)}", file=sys.stderr, flush=True)
    os._exit(EXIT_UNGUARDED_MAIN)

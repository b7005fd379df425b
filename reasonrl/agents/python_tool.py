"""The ``python`` tool: run a model-written program in the sandbox and answer with what it printed.

    tool = PythonTool(timeout_s=5)
    tool("print(12 * 34)")          -> "408\\n"
    tool("1 / 0")                   -> raises PythonToolError("the program raised an error:\\n...ZeroDivisionError...")

Each call is one program in a fresh, limited interpreter (:mod:`reasonrl.sandbox`: ``stdio`` mode, empty stdin,
namespaces where the kernel allows them; the standard library only). Nothing persists between calls: a variable
of one call is gone in the next, so a program must print what it wants to see. The answer is the program's stdout,
at most ``max_output_chars`` (cut in the middle); an exception, a non-zero exit, a kill or the timeout raise
:class:`PythonToolError` with the status and the tail of stderr (the traceback from the program's own frames),
which the tool environment sends back as the call's error.

One :class:`~reasonrl.sandbox.runner.Sandbox` per tool instance; it holds no process between calls, so one
instance may serve several environments from several threads.
"""

from __future__ import annotations

import re

from reasonrl.agents.episode import cut_middle
from reasonrl.agents.tool_calls import ToolError
from reasonrl.sandbox.runner import Job, Sandbox, SandboxLimits

NO_OUTPUT = "(no output: the program printed nothing; use print() to see values)"
_PROGRAM_FRAME = re.compile(r'File "[^"]*/prog\.py"')  # the program's own frames (its directory depends on the mode)


class PythonToolError(ToolError):
    """The program failed (error, exit status, timeout, kill); the message holds the status and stderr's tail."""


class PythonTool:
    """Callable ``tool(code) -> stdout`` (see the module docstring).

    Args:
        timeout_s: wall-clock limit of one program (its CPU limit too).
        memory_mb: address space of the program.
        max_output_chars: characters of stdout kept (cut in the middle); ``max_error_chars`` of stderr's tail.
        isolate: the sandbox's ``isolate`` (``auto``, ``ns`` or ``none``).
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        *,
        memory_mb: int = 512,
        max_output_chars: int = 4000,
        max_error_chars: int = 1500,
        isolate: str = "auto",
    ):
        limits = SandboxLimits(timeout_s=timeout_s, test_timeout_s=timeout_s, memory_mb=memory_mb, isolate=isolate)
        self.sandbox = Sandbox(limits, workers=1)
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.max_error_chars = max_error_chars

    def __call__(self, code: str) -> str:
        """Run a Python program in a sandbox and return what it printed to stdout.

        Args:
            code: the complete Python program; it must print() the values it wants to see
        """
        if not isinstance(code, str):
            raise PythonToolError(f"code must be a string, got {type(code).__name__}")
        if not code.strip():
            raise PythonToolError("code is empty")
        result = self.sandbox.run(Job(code, "stdio", inputs=[""]))
        test = result.tests[0] if result.tests else None
        if result.status == "ok" and test is not None and test.get("s") == "ok":
            out = test.get("o", "")
            return cut_middle(out, self.max_output_chars)[0] if out else NO_OUTPUT
        raise PythonToolError(self._failure(result, test))

    def _failure(self, result, test: dict | None) -> str:
        status = test.get("s") if test is not None else result.status
        if status == "timeout" or result.status == "timeout":
            head = f"the program did not finish within {self.timeout_s:g} s"
        elif test is not None and test.get("sig"):
            head = f"the program was killed ({test['sig']})"
        elif test is not None and test.get("code") not in (None, 1):
            head = f"the program exited with status {test['code']}"
        elif test is not None and status == "error":
            head = "the program raised an error" if test.get("e") else "the program exited with status 1"
        else:
            head = f"the sandbox failed ({result.status}: {result.detail})"
        err = _program_traceback((test or {}).get("e", "") or result.stderr)
        if len(err) > self.max_error_chars:
            err = "..." + err[-self.max_error_chars :]
        return f"{head}:\n{err}" if err else head


def _program_traceback(stderr: str) -> str:
    """The traceback without the sandbox's own import frames: its header, then from the program's first frame."""
    match = _PROGRAM_FRAME.search(stderr)
    if match is None:
        return stderr.strip()
    start = match.start()
    header = "Traceback (most recent call last):\n" if "Traceback" in stderr[:start] else ""
    line_start = stderr.rfind("\n", 0, start) + 1
    return header + stderr[line_start:].rstrip()

"""Untrusted programs in limited, isolated interpreters; verdicts are decided outside them (``reasonrl.rewards.code``).

See ``runner.py`` (the trusted parent), ``harness.py`` (the fixed file that runs inside) and docs/rewards.md.
Stdlib only: never imports ray, deepspeed, vllm, nor anything else of reasonrl.
"""

from reasonrl.sandbox.runner import Job, RunResult, Sandbox, SandboxLimits, namespaces_available

__all__ = ["Job", "RunResult", "Sandbox", "SandboxLimits", "namespaces_available"]

"""reasonrl.rewards and reasonrl.data stay light: no ray, deepspeed, vllm (nor torch, math-verify, reasoning-gym
until they are used)."""

from __future__ import annotations

import subprocess
import sys


def test_imports_stay_light():
    code = (
        "import sys, reasonrl.rewards, reasonrl.data, reasonrl.data.gym; "
        "print(sorted(m for m in ('ray', 'deepspeed', 'vllm', 'torch', 'math_verify', 'reasoning_gym') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"

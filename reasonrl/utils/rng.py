"""Random-number state: seeding, derived seeds, and capture/restore of the global generators for exact resume.

The state is captured as a JSON-able dict (no pickle), so it can go into a checkpoint's JSON files, through Ray,
and be read back from a checkpoint that came from elsewhere without running code::

    {"format": 1,
     "python": {"version": 3, "state": [625 ints], "gauss_next": float | None},
     "numpy":  {"bit_generator": "MT19937", "key": [624 ints], "pos": int, "has_gauss": int, "cached_gaussian": float},
     "torch":  "<base64 of torch.get_rng_state() bytes>",
     "cuda":   ["<base64 per visible device>"] | None}

Resume order: ``seed_everything(seed)`` first (it also seeds generators that were never consumed, e.g. CUDA in a
process that had not initialised it when the state was captured), then ``restore_rng_state(state)``.

Only the *global* generators are covered. Explicit ``torch.Generator`` / ``numpy.random.Generator`` objects (a
sampler's, say) are their owner's job; prefer deriving them from :func:`derive_seed` so they need no saving.
Each process has its own global state: every Ray actor that draws random numbers saves and restores its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from loguru import logger

RNG_FORMAT = 1
SEED_RANGE = 2**31  # derived seeds lie in [0, 2**31): valid for numpy, torch, vLLM and C ints alike


def seed_everything(seed: int, *, deterministic: bool = False) -> None:
    """Seed Python ``random``, NumPy's global generator and torch (CPU and every CUDA device).

    Also sets ``PYTHONHASHSEED``, which only affects processes started afterwards (Ray workers, subprocesses);
    the hash seed of the running interpreter is fixed at start-up. ``deterministic=True`` additionally asks torch
    for deterministic kernels (``warn_only``: ops without one warn instead of failing) and disables cuDNN
    benchmarking; it costs speed on GPU.
    """
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds all CUDA devices (lazily when CUDA is not initialised yet)
    os.environ["PYTHONHASHSEED"] = str(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def derive_seed(base_seed: int, *keys: int | str | bool | None) -> int:
    """A seed in ``[0, 2**31)`` that depends only on ``base_seed`` and ``keys``, e.g. ``derive_seed(seed, step, i)``.

    Stable across processes, machines and Python versions (SHA-256 of a canonical JSON encoding; never Python's
    salted ``hash``). Keys are typed: ``derive_seed(1, 2)`` and ``derive_seed(1, "2")`` differ.
    """
    for key in (base_seed, *keys):
        if not (key is None or isinstance(key, (int, str, bool))):
            raise TypeError(f"derive_seed keys must be int, str, bool or None, got {type(key).__name__}: {key!r}")
    payload = json.dumps(["reasonrl-seed", int(base_seed), *keys], separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(payload.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % SEED_RANGE


def _b64(tensor: torch.Tensor) -> str:
    return base64.b64encode(tensor.cpu().contiguous().numpy().tobytes()).decode("ascii")


def _from_b64(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text.encode("ascii"))), dtype=torch.uint8).clone()


def capture_rng_state(*, cuda: bool | None = None) -> dict[str, Any]:
    """The global RNG states of this process as a JSON-able dict (see the module docstring).

    ``cuda=None`` (default) captures CUDA states only if CUDA is available *and already initialised*, so capturing
    never creates a CUDA context as a side effect (an uninitialised device's generator still holds its seed, which
    :func:`seed_everything` reproduces). ``cuda=True`` forces it where CUDA is available; ``False`` skips it.
    """
    version, internal, gauss_next = random.getstate()
    np_state = np.random.get_state(legacy=True)
    name, key, pos, has_gauss, cached = np_state
    if cuda is None:
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cuda_states = [_b64(s) for s in torch.cuda.get_rng_state_all()] if cuda and torch.cuda.is_available() else None
    return {
        "format": RNG_FORMAT,
        "python": {"version": version, "state": list(internal), "gauss_next": gauss_next},
        "numpy": {
            "bit_generator": str(name),
            "key": [int(x) for x in key],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": _b64(torch.get_rng_state()),
        "cuda": cuda_states,
    }


def restore_rng_state(state: dict[str, Any]) -> None:
    """Set the global generators to ``state`` (from :func:`capture_rng_state` or :func:`load_rng_state`).

    CUDA states are restored when present and the number of visible devices matches; otherwise a warning says
    which part was skipped (e.g. a GPU run resumed on CPU).
    """
    if state.get("format") != RNG_FORMAT:
        raise ValueError(f"unknown RNG state format {state.get('format')!r} (expected {RNG_FORMAT})")
    py = state["python"]
    random.setstate((int(py["version"]), tuple(int(x) for x in py["state"]), py["gauss_next"]))
    npst = state["numpy"]
    np.random.set_state(
        (
            npst["bit_generator"],
            np.asarray(npst["key"], dtype=np.uint32),
            int(npst["pos"]),
            int(npst["has_gauss"]),
            float(npst["cached_gaussian"]),
        )
    )
    torch.set_rng_state(_from_b64(state["torch"]))
    cuda_states = state.get("cuda")
    if cuda_states:
        if not torch.cuda.is_available():
            logger.warning(f"RNG state has {len(cuda_states)} CUDA generator(s) but CUDA is unavailable; skipped")
        elif torch.cuda.device_count() != len(cuda_states):
            logger.warning(
                f"RNG state has {len(cuda_states)} CUDA generator(s) but {torch.cuda.device_count()} device(s) are "
                "visible; CUDA RNG not restored"
            )
        else:
            torch.cuda.set_rng_state_all([_from_b64(s) for s in cuda_states])


def save_rng_state(path: str | Path, state: dict[str, Any] | None = None) -> Path:
    """Write ``state`` (default: :func:`capture_rng_state` now) to ``path`` as JSON, atomically. Returns ``path``."""
    path = Path(path)
    state = capture_rng_state() if state is None else state
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(state, separators=(",", ":")))
    os.replace(tmp, path)
    return path


def load_rng_state(path: str | Path, *, restore: bool = True) -> dict[str, Any]:
    """Read a state written by :func:`save_rng_state`; restore it unless ``restore=False``. Returns the state."""
    state = json.loads(Path(path).read_text())
    if restore:
        restore_rng_state(state)
    return state

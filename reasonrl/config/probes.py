"""What the local machine has: model folders and their context length, the Hugging Face cache, reward_fn files or
modules, usable experiment folders, and the number of visible GPUs. Standard library only (torch imported lazily to
count GPUs, and only when a GPU driver is present)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from reasonrl.config.names import OFFLINE_MODELS

_HOW_TO_PROVIDE_MODEL = (
    "Provide the model as {field}=/path/to/hf_folder (a Hugging Face model folder with config.json; relative "
    "paths start at the current directory), or {field}=tiny / tiny-demo / smollm2 / arith-sft for the offline models "
    "of reasonrl.models.named; to use a Hub model, download it first on a machine with network, e.g. "
    "`huggingface-cli download {repo} --local-dir models/{leaf}`, and set {field}=models/{leaf}"
)


def _model_problems(name: str, value: str) -> list[str]:
    if value in OFFLINE_MODELS:
        return []
    path = Path(value).expanduser()
    repo = value if re.fullmatch(r"[\w.-]+/[\w.-]+", value) else "Qwen/Qwen2.5-7B"
    how = _HOW_TO_PROVIDE_MODEL.format(field=name, repo=repo, leaf=repo.split("/")[-1])
    if path.is_dir():
        if (path / "config.json").is_file():
            return []
        return [f"{name}={value!r} is a folder without config.json, so not a Hugging Face model folder. {how}"]
    if path.exists():
        return [f"{name}={value!r} is a file, not a model folder. {how}"]
    if _hf_cache_snapshot(value) is not None:
        return []
    looks_like_hub_id = re.fullmatch(r"[\w.-]+/[\w.-]+", value) is not None and not value.startswith((".", "/"))
    where = (
        " (it looks like a Hugging Face Hub id, and it is not in the local HF cache)"
        if looks_like_hub_id
        else f" (no such folder; current directory: {os.getcwd()})"
    )
    return [f"{name}={value!r} does not exist{where}. {how}"]


def _hf_cache_snapshot(repo_id: str) -> Path | None:
    """The local snapshot folder of a Hub model id in the Hugging Face cache (``HF_HUB_CACHE``, ``HF_HOME/hub`` or
    ``~/.cache/huggingface/hub``), if one with config.json exists; read at call time."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id or ""):
        return None
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or os.path.join(
        env.get("HF_HOME", os.path.join(os.path.expanduser("~"), ".cache", "huggingface")), "hub"
    )
    repo = Path(cache) / f"models--{repo_id.replace('/', '--')}"
    ref = repo / "refs" / "main"
    candidates = []
    if ref.is_file():
        candidates.append(repo / "snapshots" / ref.read_text().strip())
    if (repo / "snapshots").is_dir():
        candidates += sorted((repo / "snapshots").iterdir())
    return next((c for c in candidates if (c / "config.json").is_file()), None)


def _model_max_positions(value: str) -> int | None:
    """The model's context length from its config.json (stdlib JSON; None when unknown or unreadable)."""
    if value in OFFLINE_MODELS:
        return OFFLINE_MODELS[value]
    path = Path(value).expanduser()
    if not path.is_dir():
        path = _hf_cache_snapshot(value) or path
    try:
        with open(path / "config.json") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            if isinstance(section.get(key), int) and not isinstance(section.get(key), bool):
                return section[key]
    return None


def _reward_fn_problems(spec: str) -> list[str]:
    import importlib.util

    fix = "use reward_fn=path/to/file.py:function or reward_fn=package.module:function, or none for the math reward"
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        return [f"reward_fn={spec!r} needs the form file.py:function or package.module:function: {fix}"]
    if not all(part.isidentifier() for part in attr.split(".")):
        return [f"reward_fn={spec!r}: {attr!r} is not a Python name: {fix}"]
    if target.endswith(".py") or "/" in target or os.sep in target:
        path = Path(target).expanduser()
        if not path.is_file():
            return [f"reward_fn={spec!r}: file {str(path)!r} does not exist (current directory {os.getcwd()}): {fix}"]
        return []
    top = target.split(".")[0]
    try:
        found = top.isidentifier() and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return [f"reward_fn={spec!r}: module {top!r} is not importable from here: {fix}"]
    return []


def _folder_problems(name: str, value: str, exp_name: str) -> list[str]:
    """``ckpt_dir`` / ``log_dir`` (``name``) = ``value``: the run creates ``value/exp_name/``, which cannot work when
    ``value`` or ``value/exp_name`` is a file, a parent of ``value`` is a file, or the folder it writes into first
    (the nearest existing one) is not writable."""
    root = Path(value).expanduser()
    target = root / exp_name
    fix = f"give {name} a folder the run can create {target}/ in"
    for path in (root, target):
        if path.exists() and not path.is_dir():
            return [f"{name}={value!r}: {path} is a file, not a folder: {fix}"]
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"{name}={value!r}: {existing} is a file, so {root} cannot be created inside it: {fix}"]
    if not os.access(existing, os.W_OK | os.X_OK):
        return [
            f"{name}={value!r}: {existing.resolve()} is not writable by this user, so {target} cannot be created: {fix}"
        ]
    return []


def _no_gpu_driver() -> bool:
    """True when this machine certainly has no usable GPU, told without importing torch (which takes seconds):
    ``CUDA_VISIBLE_DEVICES`` hides every device, or (Linux) there is no NVIDIA driver, no ROCm device and no WSL GPU
    bridge. False means: ask torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "x").strip() in ("", "-1"):
        return True
    if not os.path.isdir("/proc") or not os.path.isdir("/dev"):  # not Linux: torch decides
        return False
    markers = ("/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")
    return not any(os.path.exists(path) for path in markers)


def _local_gpu_count() -> int:
    """CUDA devices visible to this process: 0 at once without a GPU driver (:func:`_no_gpu_driver`), else
    ``torch.cuda.device_count()`` (torch imported lazily; 0 without torch)."""
    if _no_gpu_driver():
        return 0
    try:
        import torch
    except ImportError:
        return 0
    try:
        return int(torch.cuda.device_count())
    except Exception:  # a broken driver counts as no GPU; Ray will say the same
        return 0


def _gpu_count() -> int:
    """``reasonrl.config._local_gpu_count()``, looked up on the package at each call so that patching it there
    (as tests do, to pretend a GPU count) reaches every caller."""
    import reasonrl.config

    return reasonrl.config._local_gpu_count()

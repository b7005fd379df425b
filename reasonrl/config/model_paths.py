"""Model fields (``pretrain``, ``critic_pretrain``, ``reward_pretrain``, SFT's ``pretrain``) as local folders.

A value is, in this order of precedence:

1. an offline model name (``tiny``, ``tiny-demo``, ``smollm2``, ``arith-sft``: :mod:`reasonrl.config.offline_models`);
2. an existing local path (always wins: ``models/Qwen2.5-7B`` is a folder when it exists, even though it is shaped
   like a Hub id);
3. a Hugging Face Hub id ``owner/name``, optionally at a revision ``owner/name@rev`` (a branch, tag or commit sha),
   resolved by ``huggingface_hub.snapshot_download`` to its snapshot folder in the HF cache.

The Hub cache and offline mode are read from the environment at call time (``HF_HUB_CACHE``, else
``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` or
``~/.cache/huggingface/hub``; ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``), as ``huggingface_hub.constants`` reads
them at import time, and passed explicitly to huggingface_hub.

Validation (:func:`model_problems`, :func:`model_max_positions`) never downloads: offline, a Hub id must be in the
cache; online, an uncached Hub id is accepted and :func:`resolve_model_path` downloads it on the driver (the runner's
first call, before Ray starts). ``huggingface_hub`` is imported only when a Hub id is looked up.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from reasonrl.config.errors import ConfigError
from reasonrl.config.offline_models import OFFLINE_MODELS, offline_model_path

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the Hub spells repository ids

HOW_TO_PROVIDE_MODEL = (
    "Provide the model as {field}=/path/to/hf_folder (a Hugging Face model folder with config.json; relative "
    "paths start at the current directory), or {field}=tiny / tiny-demo / smollm2 / arith-sft for the offline models "
    "of reasonrl.config.offline_models; to use a Hub model offline, download it first on a machine with network, "
    "e.g. `hf download {repo} --local-dir models/{leaf}`, and set {field}=./models/{leaf} (./ marks a folder, not a "
    "Hub id), or run with network and without HF_HUB_OFFLINE=1 so that {field}={repo} is downloaded into the HF cache"
)


def hub_cache_dir() -> Path:
    """The Hugging Face Hub cache folder, from the environment now (huggingface_hub's own order of variables)."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        xdg = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache = os.path.join(env.get("HF_HOME") or os.path.join(xdg, "huggingface"), "hub")
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to 1/true/yes/on now."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().lower() in ("1", "true", "yes", "on")


def split_hub_id(value: str) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` of a Hub-id-shaped value (``owner/name`` or ``owner/name@rev``; revision None =
    ``main``), else None. Local paths are not excluded here: :func:`resolve_model_path` checks them first."""
    repo_id, sep, revision = value.partition("@")
    if not HUB_ID.fullmatch(repo_id) or (sep and not revision):
        return None
    return repo_id, (revision or None)


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of ``repo_id`` at ``revision`` (default ``main``) in the Hub cache, if it is there,
    complete as far as the cache knows, and holds config.json; never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, revision=revision, cache_dir=hub_cache_dir(), local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError, OSError):  # IncompleteSnapshotError is a LocalEntryNotFound
        return None
    return Path(folder) if (Path(folder) / "config.json").is_file() else None


def _how(field: str, repo: str) -> str:
    return HOW_TO_PROVIDE_MODEL.format(field=field, repo=repo, leaf=repo.split("/")[-1])


def _not_cached(field: str, value: str, repo_id: str) -> str:
    return (
        f"{field}={value!r} does not exist locally, and the Hugging Face Hub id {repo_id!r} is not in the local HF "
        f"cache ({hub_cache_dir()}){' while HF_HUB_OFFLINE=1' if hub_offline() else ''}. {_how(field, repo_id)}"
    )


_DOWNLOADED: dict[tuple[str, str | None, str], str] = {}  # (repo_id, revision, cache) -> snapshot, this process


def resolve_model_path(value: str | None, field: str = "pretrain") -> str | None:
    """A model field's value as a local folder (module docstring for the order). Offline names are built on first
    use; a Hub id becomes its snapshot folder, downloaded first when online and not cached (once per process);
    anything else is returned as an expanded path (loading it names the problem). Raises :class:`ConfigError`
    when a Hub id cannot be had (offline and not cached, unknown, no network)."""
    if value is None:
        return None
    if value in OFFLINE_MODELS:
        return str(offline_model_path(value))
    path = Path(value).expanduser()
    hub = split_hub_id(value)
    if path.exists() or hub is None:
        return str(path)
    repo_id, revision = hub
    key = (repo_id, revision, str(hub_cache_dir()))
    if key not in _DOWNLOADED:
        _DOWNLOADED[key] = _snapshot_folder(field, value, repo_id, revision)
    return _DOWNLOADED[key]


def _snapshot_folder(field: str, value: str, repo_id: str, revision: str | None) -> str:
    """``snapshot_download`` of ``repo_id@revision`` into the cache (cache only when offline); errors become a
    :class:`ConfigError` with the way to provide the model."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    offline = hub_offline()
    try:
        return snapshot_download(repo_id, revision=revision, cache_dir=hub_cache_dir(), local_files_only=offline)
    except LocalEntryNotFoundError as error:
        problem = _not_cached(field, value, repo_id)
        if not offline:
            problem += f" (the download failed: {type(error).__name__}: {str(error).splitlines()[0]})"
        raise ConfigError([problem], title="model not available") from error
    except (HFValidationError, OSError) as error:  # unknown repo or revision, gated, HTTP errors: all OSErrors
        problem = f"{field}={value!r}: the Hub could not provide it ({type(error).__name__}: {error})"
        raise ConfigError([f"{problem}. {_how(field, repo_id)}"], title="model not available") from error


def model_problems(field: str, value: str) -> list[str]:
    """Why ``field=value`` cannot be a model (empty when it can); never downloads. An offline name, a local folder
    with config.json, a Hub id in the cache, or (online) any Hub-id-shaped value pass."""
    if value in OFFLINE_MODELS:
        return []
    path = Path(value).expanduser()
    hub = split_hub_id(value)
    how = _how(field, hub[0] if hub else "Qwen/Qwen2.5-7B")
    if path.is_dir():
        if (path / "config.json").is_file():
            return []
        return [f"{field}={value!r} is a folder without config.json, so not a Hugging Face model folder. {how}"]
    if path.exists():
        return [f"{field}={value!r} is a file, not a model folder. {how}"]
    if hub is None:  # ./x, /x, ~/x, a/b/c: paths, never Hub ids
        return [f"{field}={value!r} does not exist (no such folder; current directory: {os.getcwd()}). {how}"]
    if not hub_offline() or cached_snapshot(*hub) is not None:
        return []  # online: resolve_model_path downloads it before anything starts
    return [_not_cached(field, value, hub[0])]


def model_max_positions(value: str) -> int | None:
    """The model's context length from its config.json: a local folder's, or a Hub id's cached snapshot's (read
    from the cache only; None when unknown, not cached yet or unreadable)."""
    if value in OFFLINE_MODELS:
        return OFFLINE_MODELS[value]
    path = Path(value).expanduser()
    config_file = path / "config.json"
    hub = split_hub_id(value)
    if not path.is_dir() and hub is not None:
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(hub[0], "config.json", cache_dir=hub_cache_dir(), revision=hub[1])
        except ValueError:  # an id the Hub would refuse
            return None
        if not isinstance(cached, str):
            return None
        config_file = Path(cached)
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            if isinstance(section.get(key), int) and not isinstance(section.get(key), bool):
                return section[key]
    return None

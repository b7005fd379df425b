"""Model fields (``pretrain``, ``critic_pretrain``, ``reward_pretrain``, SFT's ``pretrain``) as local folders.

A value is, in this order of precedence:

1. an offline model name (``tiny``, ``tiny-demo``, ``tiny-code``, ``smollm2``, ``arith-sft``, ``code-sft``,
   ``tools-sft``, ``tools-sft-notool``: :mod:`reasonrl.config.offline_models`);
2. an existing local path (always wins: ``models/Qwen2.5-7B`` is a folder when it exists, even though it is shaped
   like a Hub id);
3. a Hugging Face Hub id ``owner/name``, optionally at a revision ``owner/name@rev`` (a branch, tag or commit sha),
   resolved by ``huggingface_hub.snapshot_download`` to its snapshot folder in the HF cache.

The Hub cache and offline mode are read from the environment at call time (``HF_HUB_CACHE``, else
``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` or
``~/.cache/huggingface/hub``; ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``), as ``huggingface_hub.constants`` reads
them at import time, and passed explicitly to huggingface_hub (the lookups themselves live in
:mod:`reasonrl.utils.hub`, which the actors use on their own nodes).

Validation (:func:`model_problems`, :func:`model_max_positions`) never downloads: offline, a Hub id must be in the
cache; online, an uncached Hub id is accepted and :func:`resolve_model_path` downloads it on the driver (the runner's
first call, before Ray starts). ``huggingface_hub`` is imported only when a Hub id is looked up.

Several nodes, and resume. A Hub id is pinned on the driver to the commit it resolves to there (:func:`pinned_model`:
``owner/name`` -> ``owner/name@<commit>``); the run records the pinned id in its config (:func:`pin_model_fields`,
and what the user gave in the saved config's ``_pinned_from``), and what goes to the actors is that id, not the
driver's folder (:func:`model_source`): each actor finds the commit in its own node's cache
(:func:`reasonrl.utils.hub.local_model_folder`). A resume takes the commit its checkpoint recorded
(:func:`adopt_saved_pins`), whatever ``main`` points at by then.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasonrl.config.errors import ConfigError
from reasonrl.config.offline_models import OFFLINE_MODELS, offline_model_path
from reasonrl.utils.hub import (
    HUB_ID,
    cached_snapshot,
    hub_cache_dir,
    hub_offline,
    is_commit,
    snapshot_commit,
    split_hub_id,
)

__all__ = [  # the Hub lookups live in reasonrl.utils.hub (actors use them too); re-exported here
    "HOW_TO_PROVIDE_MODEL",
    "HUB_ID",
    "MODEL_FIELDS",
    "adopt_saved_pins",
    "cached_snapshot",
    "hub_cache_dir",
    "hub_offline",
    "model_folder_problems",
    "model_max_positions",
    "model_problems",
    "uncached_hub_note",
    "model_source",
    "pin_model_fields",
    "pin_record",
    "pinned_model",
    "resolve_model_path",
    "split_hub_id",
]

HOW_TO_PROVIDE_MODEL = (
    "Provide the model as {field}=/path/to/hf_folder (a Hugging Face model folder with config.json; relative "
    "paths start at the current directory), or {field}=tiny / tiny-demo / smollm2 / arith-sft for the offline models "
    "of reasonrl.config.offline_models; to use a Hub model offline, download it first on a machine with network, "
    "e.g. `hf download {repo} --local-dir models/{leaf}`, and set {field}=./models/{leaf} (./ marks a folder, not a "
    "Hub id), or run with network and without HF_HUB_OFFLINE=1 so that {field}={repo} is downloaded into the HF cache"
)


def _how(field: str, repo: str) -> str:
    return HOW_TO_PROVIDE_MODEL.format(field=field, repo=repo, leaf=repo.split("/")[-1])


def _not_cached(field: str, value: str, repo_id: str, revision: str | None = None) -> str:
    at = f" at revision {revision}" if revision else ""
    problem = (
        f"{field}={value!r} does not exist locally, and the Hugging Face Hub id {repo_id!r}{at} is not in the local "
        f"HF cache ({hub_cache_dir()}){' while HF_HUB_OFFLINE=1' if hub_offline() else ''}. {_how(field, repo_id)}"
    )
    if revision:
        problem += f"; that revision into the cache: `hf download {repo_id} --revision {revision}`"
    return problem


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
        problem = _not_cached(field, value, repo_id, revision)
        if not offline:
            problem += f" (the download failed: {type(error).__name__}: {str(error).splitlines()[0]})"
        raise ConfigError([problem], title="model not available") from error
    except (HFValidationError, OSError) as error:  # unknown repo or revision, gated, HTTP errors: all OSErrors
        problem = f"{field}={value!r}: the Hub could not provide it ({type(error).__name__}: {error})"
        raise ConfigError([f"{problem}. {_how(field, repo_id)}"], title="model not available") from error


# ------------------------------------------------------------------------------------------ pinning
MODEL_FIELDS = (
    "pretrain",
    "critic_pretrain",
    "reward_pretrain",
    "teacher_pretrain",
    "judge_pretrain",
)  # the model fields of a config (SFT: pretrain)
PINNED_FROM = "_pinned_from"  # saved-config key: {field: the value the user gave} for each field pinned by the run


def _hub_model(value: str | None) -> tuple[str, str | None] | None:
    """``(repo_id, revision)`` when ``value`` names a Hub model (not None, not an offline name, not an existing
    local path), else None."""
    if value is None or value in OFFLINE_MODELS or Path(value).expanduser().exists():
        return None
    return split_hub_id(value)


def pinned_model(value: str | None, field: str = "pretrain") -> str | None:
    """``value`` with a Hub id's revision replaced by the commit it resolves to now, on this machine
    (``owner/name`` or ``owner/name@branch`` -> ``owner/name@<40-hex commit>``; resolved, i.e. downloaded when online
    and not cached, by :func:`resolve_model_path`). A value already at a commit, an offline name and a local path
    are returned unchanged (ConfigError when the Hub id cannot be had, as :func:`resolve_model_path`)."""
    hub = _hub_model(value)
    if hub is None or is_commit(hub[1]):
        return value
    commit = snapshot_commit(resolve_model_path(value, field))
    return f"{hub[0]}@{commit}" if commit else value  # a cache that is not Hub-shaped: left as given


def model_source(value: str | None, field: str = "pretrain") -> str | None:
    """What the actors get for a model field: a Hub id pinned to its commit (:func:`pinned_model`; each actor finds
    that commit in its own node's HF cache, :func:`reasonrl.utils.hub.local_model_folder`), else the local folder
    as an absolute path (an offline model built here first): a local folder must exist at that path on every node
    that loads it. Resolved on this machine first, as :func:`resolve_model_path` (downloaded when online)."""
    if value is None:
        return None
    folder = resolve_model_path(value, field)  # the driver has it too (its tokenizer, its node)
    if _hub_model(value) is not None:
        return pinned_model(value, field)
    return str(Path(folder).absolute())


def _pins(cfg: Any) -> dict[str, str]:
    """``{field: value given}`` of the fields this run pinned (kept on the config object, written to its JSON)."""
    return cfg.__dict__.setdefault(PINNED_FROM, {})


def pin_model_fields(cfg: Any, fields: Sequence[str] = MODEL_FIELDS) -> dict[str, str]:
    """Pin every Hub-id model field of ``cfg`` to its commit in place (:func:`pinned_model`), so that the run, its
    logs and its checkpoints name the exact weights. Returns ``{field: pinned id}`` of the fields changed; what
    was given is remembered (:func:`pin_record`) for a later resume. Resolves, so downloads when online."""
    changed = {}
    for name in fields:
        given = getattr(cfg, name, None)
        pinned = pinned_model(given, name)
        if pinned != given:
            setattr(cfg, name, pinned)
            _pins(cfg).setdefault(name, given)
            changed[name] = pinned
    return changed


def adopt_saved_pins(cfg: Any, saved: Mapping[str, Any], fields: Sequence[str] = MODEL_FIELDS) -> dict[str, str]:
    """Resume: give each model field of ``cfg`` the commit its checkpoint's saved config pinned, when this run asks
    for the same model as that run did (the value it gave, ``saved["_pinned_from"]``; for a config saved without
    that record, a bare ``owner/name`` of the same repository). Called before the saved and current configs are
    compared, so ``owner/name`` then matches the recorded ``owner/name@<commit>``, and the resumed run loads that
    commit, not whatever ``main`` is now. Any other value is left as it is (the comparison then reports it).
    Returns ``{field: pinned id}`` of the fields changed."""
    record = saved.get(PINNED_FROM)
    record = record if isinstance(record, Mapping) else None
    adopted = {}
    for name in fields:
        given, pinned = getattr(cfg, name, None), saved.get(name)
        hub, saved_hub = _hub_model(given), split_hub_id(pinned) if isinstance(pinned, str) else None
        if hub is None or saved_hub is None or is_commit(hub[1]) or not is_commit(saved_hub[1]):
            continue
        same_request = record.get(name) == given if record is not None else (hub == (saved_hub[0], None))
        if same_request and hub[0] == saved_hub[0]:
            setattr(cfg, name, pinned)
            _pins(cfg).setdefault(name, given)
            adopted[name] = pinned
    return adopted


def pin_record(cfg: Any) -> dict[str, Any]:
    """``{"_pinned_from": {field: value given}}`` for a saved config (empty when nothing was pinned)."""
    pins = cfg.__dict__.get(PINNED_FROM)
    return {PINNED_FROM: dict(pins)} if pins else {}


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
            return model_folder_problems(field, value, path)
        return [f"{field}={value!r} is a folder without config.json, so not a Hugging Face model folder. {how}"]
    if path.exists():
        return [f"{field}={value!r} is a file, not a model folder. {how}"]
    if hub is None:  # ./x, /x, ~/x, a/b/c: paths, never Hub ids
        return [f"{field}={value!r} does not exist (no such folder; current directory: {os.getcwd()}). {how}"]
    if not hub_offline() or cached_snapshot(*hub) is not None:
        return []  # online: resolve_model_path downloads it before anything starts
    return [_not_cached(field, value, *hub)]


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


def uncached_hub_note(field: str, value: str | None) -> str | None:
    """For a refusal that has other problems: a line saying that ``field``'s Hub id is not in the local cache and
    would be downloaded at start-up (None when it is not an uncached Hub id, or offline, where
    :func:`model_problems` already refuses it). No network call: whether the Hub has it is learnt when it is
    downloaded, after the configuration is accepted."""
    hub = _hub_model(value)
    if hub is None or hub_offline() or cached_snapshot(*hub) is not None:
        return None
    return (
        f"{field}={value!r} is not in the local HF cache ({hub_cache_dir()}): it would be downloaded before start-up "
        f"(nothing is downloaded while the configuration is refused; to fetch it now: `hf download {hub[0]}`)"
    )


# ------------------------------------------------------------------------------------------ folder contents
# What transformers' AutoTokenizer can build a tokenizer from: a fast tokenizer file, or a tokenizer_config.json
# with the vocabulary files of its class (the VOCAB_FILES_NAMES of transformers' tokenizers). Any one of these
# makes the folder pass; the check only refuses a folder that has none of them, which no tokenizer class loads.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.model",
    "tekken.json",
    "vocab.tiktoken",
)
# tokenizer classes that need no vocabulary file (byte- or character-level)
VOCABULARY_FREE_TOKENIZERS = ("ByT5Tokenizer", "CanineTokenizer")


def known_model_types() -> frozenset[str] | None:
    """The ``model_type`` values the installed transformers knows, read from its generated
    ``models/auto/auto_mappings.py`` (plain data) and the few names ``configuration_auto.py`` adds, without importing
    transformers (which imports torch: seconds). None when that file is not where this transformers version keeps
    it: the check is then skipped, never guessed."""
    global _MODEL_TYPES
    if _MODEL_TYPES is not None:
        return _MODEL_TYPES or None
    import importlib.util
    import re

    _MODEL_TYPES = frozenset()
    try:
        spec = importlib.util.find_spec("transformers")  # finds the package, does not run its __init__
        auto = Path(spec.origin).parent / "models" / "auto"
        mappings = importlib.util.spec_from_file_location("_reasonrl_tf_auto_mappings", auto / "auto_mappings.py")
        module = importlib.util.module_from_spec(mappings)
        mappings.loader.exec_module(module)
        names = set(module.CONFIG_MAPPING_NAMES)
        extra = (auto / "configuration_auto.py").read_text()
        names |= set(re.findall(r'^\s*\(?"([\w.-]+)"\s*[:,]\s*"\w+Config"', extra, re.M))
        names |= set(re.findall(r'"([\w.-]+)":\s*"\w+Config"', extra))
    except Exception:  # noqa: BLE001 - another layout of transformers: no check rather than a wrong refusal
        return None
    _MODEL_TYPES = frozenset(names)
    return _MODEL_TYPES


_MODEL_TYPES: frozenset[str] | None = None


def model_folder_problems(field: str, value: str, folder: Path) -> list[str]:
    """Why a local folder with config.json cannot be loaded (empty when it can): config.json unreadable, its
    ``model_type`` unknown to the installed transformers (unless ``auto_map`` names remote code), no usable
    tokenizer (``pretrain`` only: the run loads the policy's tokenizer). Reads files
    only; imports neither torch nor transformers."""
    problems = []
    try:
        config = json.loads((folder / "config.json").read_text())
        if not isinstance(config, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as error:
        return [f"{field}={value!r}: its config.json cannot be read ({type(error).__name__}: {error})"]
    model_type = config.get("model_type")
    known = known_model_types()
    if "auto_map" not in config and isinstance(model_type, str) and known is not None and model_type not in known:
        arch = config.get("architectures")
        arch_text = f" (architectures {arch})" if arch else ""
        problems.append(
            f"{field}={value!r}: config.json names model_type={model_type!r}{arch_text}, which the installed "
            f"transformers does not know, so the model cannot be built; use a model of a supported architecture "
            f"(e.g. qwen2, llama), or a newer transformers if this architecture was added since"
        )
    if field == "pretrain":  # the policy's tokenizer is the run's (a critic or reward folder may lack one)
        problems += tokenizer_problems(field, value, folder)
    return problems


def tokenizer_problems(field: str, value: str, folder: Path) -> list[str]:
    """A folder with none of the files any tokenizer class loads from (:data:`TOKENIZER_FILES`, a vocabulary-free
    class, or remote code in tokenizer_config.json's ``auto_map``) has no usable tokenizer."""
    if any((folder / name).is_file() for name in TOKENIZER_FILES) or any(folder.glob("*.tiktoken")):
        return []
    try:
        tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        tok_config = None
    if isinstance(tok_config, dict) and (
        tok_config.get("tokenizer_class") in VOCABULARY_FREE_TOKENIZERS or "auto_map" in tok_config
    ):
        return []
    has_config = "tokenizer_config.json without" if tok_config is not None else "no"
    return [
        f"{field}={value!r} has no usable tokenizer: {has_config} tokenizer.json or vocabulary files "
        f"({', '.join(TOKENIZER_FILES[1:6])}, ...); copy the tokenizer files of the model it was trained from "
        f"into the folder"
    ]

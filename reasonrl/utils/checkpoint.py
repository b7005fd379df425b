"""Checkpoint directories of one experiment: atomic saves, one history, retention, and resume resolution.

Layout under one experiment's root (``ckpt/<exp>/``)::

    step_<n>/                      one checkpoint per saved step (n = global step, no zero padding)
        ...                        whatever the trainer and its actors wrote (DeepSpeed folders, HF export, JSON)
        trainer_state.json         optional, see save_trainer_state()
        meta.json                  written by commit(): format, step, time, manifest (size + SHA-256 per file), meta
        COMPLETE                   written by commit() LAST, after everything else was fsynced
    .step_<n>.tmp-<random>/        staging directory of a save in progress (or of one that crashed)
    step_<n>.damaged-<time>/       a checkpoint that failed the "complete" check, moved aside (never deleted)
    step_<n>.superseded-<time>/    a checkpoint of another history of this run (see start_from), moved aside

"Complete" has one definition, in :mod:`reasonrl.utils.checkpoint_manifest`: marker, ``meta.json`` and every file
of the manifest with its size and checksum. Our own saves can only produce complete ``step_<n>`` directories
(staging dir + rename); the check catches what happened to them afterwards (a truncated or corrupted file, a
half-finished copy).

Saving works in two shapes:

- the driver alone: ``with manager.staging(step, meta) as tmp: write into tmp`` (commit on success, abort on error);
- collectively (DeepSpeed saves from several Ray actors): ``tmp = manager.begin(step)``, pass ``tmp`` to the actors,
  they write and return, then ``manager.commit(step, tmp, meta)`` (or ``manager.abort(tmp)`` when any failed).
  The root must be on a filesystem every writer sees (one node, or a shared filesystem on clusters), and writers
  must have closed their files before ``commit`` (DeepSpeed does) so the driver's fsync and checksums cover them.

One run holds its root alone, so :meth:`CheckpointManager.begin` and :meth:`CheckpointManager.resolve_resume`
delete staging directories that no save of this process is writing (left by a crash). A checkpoint is never
deleted except by retention (:meth:`CheckpointManager.prune`) or ``overwrite=True``; everything else that is in
the way is moved aside with a warning.

One history: when a run saves step ``n``, any ``step_<m>`` with ``m >= n`` still in the root belongs to another
continuation (a run resumed from an older checkpoint, or started afresh over an old one) and is moved aside
(``superseded``; ``damaged`` when it fails the check), so ``resume=auto`` later continues this run. With
``overwrite=True`` a complete ``step_<n>`` is replaced instead: the old one is moved aside, the new one renamed
in, then the old one deleted.
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

from reasonrl.utils.checkpoint_manifest import (
    CHECKPOINT_FORMAT,
    COMPLETE_MARKER,
    META_FILE,
    VERIFY_LEVELS,
    build_manifest,
    check_complete,
    is_complete,
    read_meta,
    step_dir_name,
    step_of,
)
from reasonrl.utils.paths import move_aside

__all__ = [
    "COMPLETE_MARKER",
    "META_FILE",
    "TRAINER_STATE_FILE",
    "CheckpointError",
    "CheckpointManager",
    "NoCompleteCheckpointError",
    "check_complete",
    "config_hash",
    "is_complete",
    "load_trainer_state",
    "read_meta",
    "save_trainer_state",
    "step_dir_name",
    "step_of",
]

TRAINER_STATE_FILE = "trainer_state.json"
_STAGING_DIR = re.compile(r"^\.step_(\d+)\.(?:tmp|old)-")
_ASIDE_DIR = re.compile(r"^step_(\d+)\.(damaged|superseded)-")
_RESERVED_META = ("step", "time", "files", "format")
_ACTIVE_STAGING: set[str] = set()  # staging dirs of saves in progress in this process (never cleaned up)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be used or written (the message names the path and the reason)."""


class NoCompleteCheckpointError(CheckpointError):
    """``resume=auto`` found checkpoint folders but none is complete; the message names them and the choices."""


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

    ``keep_last <= 0`` keeps everything. ``verify`` is how much of the "complete" rule a resume checks:
    ``"full"`` (sizes and SHA-256 of every file, the default) or ``"size"`` (sizes only, for checkpoints too big to
    read once more at resume). See the module docstring for layout, history and overwriting.
    """

    def __init__(
        self, root: str | Path, keep_last: int, *, overwrite: bool = False, fsync: bool = True, verify: str = "full"
    ):
        if verify not in VERIFY_LEVELS[:2]:
            raise ValueError(f"verify={verify!r}: a resume trusts 'full' (sizes and checksums) or 'size' checks")
        self.root = Path(root).expanduser()
        self.keep_last = int(keep_last)
        self.overwrite = overwrite
        self.fsync = fsync
        self.verify = verify

    @classmethod
    def for_run(cls, cfg) -> CheckpointManager:
        """The checkpoints of the run ``cfg`` describes: ``<ckpt_dir>/<exp_name>``, keeping ``keep_last_ckpts``
        (a training or an SFT config; any object with those three fields)."""
        return cls(Path(cfg.ckpt_dir) / cfg.exp_name, keep_last=cfg.keep_last_ckpts)

    # ----- reading -----
    def path_for(self, step: int) -> Path:
        return self.root / step_dir_name(step)

    def step_dirs(self) -> list[Path]:
        """Every ``step_<n>`` directory, complete or not, oldest step first."""
        if not self.root.is_dir():
            return []
        found = [(step_of(p), p) for p in self.root.iterdir() if step_of(p) is not None and p.is_dir()]
        return [p for _, p in sorted(found)]

    def list_complete(self, *, verify: str = "marker") -> list[Path]:
        """Complete checkpoints, oldest step first. The default ``verify="marker"`` only reads marker and meta (for
        listing and retention); pass ``"size"`` or ``"full"`` to check the files too."""
        return [p for p in self.step_dirs() if is_complete(p, verify=verify)]

    def set_aside(self) -> list[Path]:
        """Folders moved aside earlier (``step_<n>.damaged-*``, ``step_<n>.superseded-*``), by name."""
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if _ASIDE_DIR.match(p.name) and p.is_dir())

    def latest(self) -> Path | None:
        """The newest complete checkpoint (checked at ``self.verify``); damaged newer ones are skipped with a
        warning and left in place (:meth:`resolve_resume` moves them aside)."""
        for path in reversed(self.step_dirs()):
            reason = check_complete(path, verify=self.verify)
            if reason is None:
                return path
            logger.warning(f"checkpoint {path} is not complete ({reason}); looking at an older one")
        return None

    # ----- resuming -----
    def resolve_resume(self, resume: str | Path | None) -> Path | None:
        """What to resume from: ``"auto"`` → the newest complete checkpoint, ``"none"``/``""``/``None`` → ``None``,
        anything else → that checkpoint path (a relative path that does not exist is also tried under ``root``, so
        ``"step_100"`` works). Staging leftovers of a crashed save are deleted first.

        ``"auto"`` walks the checkpoints newest first and moves each damaged one aside (``step_<n>.damaged-<time>``,
        a warning names the file and what differs) before trying the next. It returns ``None`` (a fresh start) only
        when the root holds no ``step_<n>`` folder and none set aside as damaged (folders set aside as superseded
        were abandoned on purpose), and raises :class:`NoCompleteCheckpointError` when it holds only damaged ones,
        never silently starting over. An explicit path that is not complete raises :class:`CheckpointError` naming it
        and why. Nothing is deleted; call :meth:`start_from` once the resume is accepted.
        """
        self.clean_staging()
        text = "" if resume is None else str(resume).strip()
        if text.lower() in ("", "none"):
            return None
        if text.lower() == "auto":
            return self._resolve_auto()
        path = Path(text).expanduser()
        if not path.exists() and not path.is_absolute() and (self.root / path).exists():
            path = self.root / path
        reason = check_complete(path, verify=self.verify)
        if reason is not None:
            raise CheckpointError(f"cannot resume from {path}: not a complete checkpoint ({reason})")
        others = self._other_history(path)
        if others:
            logger.warning(
                f"resuming from {path} while {self.root} holds {', '.join(p.name for p in others)}: they continue "
                "another history and are moved aside (step_<m>.superseded-<time>, not deleted) when the resume starts"
            )
        return path

    def _resolve_auto(self) -> Path | None:
        damaged, moved = [], set()
        for path in reversed(self.step_dirs()):
            reason = check_complete(path, verify=self.verify)
            if reason is None:
                logger.info(f"resume=auto: resuming from {path}")
                return path
            aside = self._move_aside(path, "damaged", reason)
            damaged.append(f"{path.name} (moved aside to {aside.name}: {reason})")
            moved.add(aside.name)
        earlier = [p.name for p in self.set_aside() if ".damaged-" in p.name and p.name not in moved]
        damaged += [f"{name} (moved aside by an earlier resume)" for name in earlier]
        if damaged:
            raise NoCompleteCheckpointError(
                f"resume=auto found no complete checkpoint in {self.root}, only damaged ones: {'; '.join(damaged)}. "
                "Nothing was deleted, and the run does not silently start over. Choose: resume=none starts this run "
                "afresh on purpose (its old logs are moved aside, not deleted); or repair a checkpoint, rename it "
                "back to step_<n> and pass resume=<its path>; or use another exp_name or ckpt_dir"
            )
        logger.info(f"resume=auto: no checkpoint in {self.root}, starting afresh")
        return None

    def _other_history(self, path: Path | None) -> list[Path]:
        """The ``step_<m>`` folders of this root that a run continuing ``path`` (None: a fresh start) never wrote."""
        if path is None or Path(path).parent.resolve() != self.root.resolve():
            return self.step_dirs()  # a fresh start, or a fork of another root's checkpoint: all of them
        return [p for p in self.step_dirs() if step_of(p) > step_of(path)]

    def start_from(self, path: str | Path | None) -> list[Path]:
        """Make this root the history of a run continuing ``path`` (None: a fresh start). Call once the resume is
        accepted, before training: every ``step_<m>`` it would not have written (all of them for a fresh start or a
        checkpoint of another root, those with ``m`` above the resumed step otherwise) is moved aside as
        ``step_<m>.superseded-<time>`` with a warning, never deleted, so that ``resume=auto`` later continues this
        run and its saves never meet them. Returns the new paths."""
        path = None if path is None else Path(path)
        why = "resume=none starts afresh" if path is None else f"this run continues {path}"
        return [self._move_aside(p, "superseded", why) for p in self._other_history(path)]

    def _move_aside(self, path: Path, tag: str, why: str) -> Path:
        aside = move_aside(path, tag)
        logger.warning(f"checkpoint {path} moved aside to {aside.name} (not deleted): {why}")
        return aside

    def clean_staging(self) -> list[Path]:
        """Delete staging directories no save of this process is writing (a crashed save's); returns them."""
        if not self.root.is_dir():
            return []
        stale = [
            p
            for p in self.root.iterdir()
            if _STAGING_DIR.match(p.name) and p.is_dir() and str(p.resolve()) not in _ACTIVE_STAGING
        ]
        for p in stale:
            shutil.rmtree(p, ignore_errors=True)
        if stale:
            logger.warning(f"removed staging folder(s) of an interrupted save: {', '.join(p.name for p in stale)}")
        return stale

    # ----- writing -----
    def begin(self, step: int) -> Path:
        """Create and return an empty staging directory for ``step`` (in ``root``, so the final rename is atomic),
        after deleting staging leftovers of crashed saves."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.clean_staging()
        staging = Path(tempfile.mkdtemp(prefix=f".{step_dir_name(step)}.tmp-", dir=self.root))
        _ACTIVE_STAGING.add(str(staging.resolve()))
        return staging

    def commit(self, step: int, staging_path: str | Path, meta: dict[str, Any] | None = None, *, prune=True) -> Path:
        """Finalise a staging directory: write ``meta.json`` (manifest with checksums), fsync, write ``COMPLETE``,
        move aside what is in the way (module docstring: one history), rename to ``step_<n>``.

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
        _ACTIVE_STAGING.discard(str(staging.resolve()))  # from here on, a failed commit leaves it to the cleanup
        final = self.path_for(step)
        start = time.perf_counter()
        record = {"format": CHECKPOINT_FORMAT, "step": int(step), "time": time.time(), **meta}
        record["files"] = build_manifest(staging)
        hashed_s = time.perf_counter() - start
        _write_json_atomic(staging / META_FILE, record, fsync=False)
        if self.fsync:
            _fsync_tree(staging)
        _write_json_atomic(staging / COMPLETE_MARKER, {"step": int(step)}, fsync=self.fsync)
        if self.fsync:
            _fsync_path(staging)
        for other in self.step_dirs():  # another history's steps >= this one (module docstring)
            if step_of(other) > step:
                self._move_aside(other, "superseded", f"this run saved step {step} after another history's")
        aside = None
        if final.exists():
            reason = check_complete(final, verify=self.verify)
            if self.overwrite and reason is None:
                aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=self.root))
                os.rename(final, aside / final.name)
                logger.warning(f"replacing existing {final} (overwrite=True)")
            elif reason is None:
                self._move_aside(final, "superseded", f"this run saved step {step} again")
            else:
                self._move_aside(final, "damaged", reason)
        os.rename(staging, final)
        if self.fsync:
            _fsync_path(self.root)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        size = sum(entry["size"] for entry in record["files"].values())
        logger.info(
            f"checkpoint {final} complete ({len(record['files'])} files, {size / 1e6:.1f} MB, "
            f"checksums in {hashed_s:.2f} s)"
        )
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
        _ACTIVE_STAGING.discard(str(staging.resolve()))

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
        """Delete complete checkpoints beyond the newest ``keep_last`` and staging directories of crashed saves.

        ``protect`` (and the newest complete checkpoint) is never deleted; incomplete ``step_<n>`` directories and
        folders moved aside are left alone. Returns what was deleted.
        """
        doomed = self.clean_staging()
        complete = self.list_complete()
        if not complete:
            return doomed
        keep = {p.name for p in (complete[-self.keep_last :] if self.keep_last > 0 else complete)}
        keep.add(complete[-1].name)
        if protect is not None:
            keep.add(Path(protect).name)
        old = [p for p in complete if p.name not in keep]
        for p in old:
            shutil.rmtree(p, ignore_errors=True)
        if old:
            logger.info(f"pruned {', '.join(p.name for p in old)} from {self.root}")
        return doomed + old

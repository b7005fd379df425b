"""Where reasonrl keeps things it builds once and reuses (models converted or generated offline).

The cache root is ``$REASONRL_CACHE`` when set, else ``~/.cache/reasonrl``. It lives outside the repository so a
fresh clone (CI) reuses what an earlier run on the same machine built.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def cache_root() -> Path:
    """The cache root directory (created on demand)."""
    root = Path(os.environ.get("REASONRL_CACHE", Path.home() / ".cache" / "reasonrl")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def atomic_directory(final: Path, *, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary directory next to ``final``; on success rename it to ``final`` in one step.

    Readers therefore see either no directory or a complete one, never a half-written one. On error nothing is
    left behind and ``final`` is untouched. If ``final`` exists when the new one is ready:

    * ``replace=False`` (a cache: first complete copy wins): the new copy is discarded;
    * ``replace=True`` (an export the user asked to overwrite): the old folder is renamed aside, the new one
      renamed in, then the old one removed (restored if the second rename fails).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        yield tmp
        for path in tmp.rglob("*"):
            if path.is_file():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
        aside = None
        if replace and final.exists():
            aside = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=final.parent))
            os.rmdir(aside)  # a unique free name next to final
            os.rename(final, aside)
        try:
            os.rename(tmp, final)
        except OSError:
            if aside is not None:
                os.rename(aside, final)
                raise
            if not final.exists():
                raise
            # another process put a complete ``final`` in place meanwhile: keep it, discard ours
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def move_aside(path: str | Path, tag: str) -> Path:
    """Rename ``path`` to ``<name>.<tag>-<YYYYmmdd-HHMMSS>`` next to it (``-2``, ``-3``... when that name is taken)
    and return the new path. Nothing is deleted: what was set aside stays for the user to inspect or remove."""
    path = Path(path)
    base = path.with_name(f"{path.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}")
    target, n = base, 1
    while target.exists() or target.is_symlink():
        n += 1
        target = base.with_name(f"{base.name}-{n}")
    os.rename(path, target)
    return target

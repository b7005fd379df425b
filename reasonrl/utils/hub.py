"""Hugging Face Hub model ids and the HF cache of *this* process: what every node looks up for itself.

A model field that is a Hub id (``owner/name`` or ``owner/name@revision``) is pinned once, on the driver, to the
commit it resolves to (``owner/name@<40-hex commit>``: ``reasonrl.config.model_paths.model_source``), and that id,
never the driver's snapshot folder, is what travels to the actors. Each actor that loads a model (the DeepSpeed
workers, the vLLM engine) calls :func:`local_model_folder` in its own process right before loading: the snapshot of
that commit in its own node's HF cache, downloaded there first when the node is online, else
:class:`ModelNotOnNodeError` naming the node, the model, the commit, the cache and what to do. A local folder is
returned as it is once it exists on this node (it must then exist at the same path on every node).

The cache folder and offline mode are read from the environment at call time, as the process sees it on its node
(``HF_HUB_CACHE``, else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``
or ``~/.cache/huggingface/hub``; ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``), the order ``huggingface_hub``
itself reads them in at import time, and passed to it explicitly.

Standard library only at import; ``huggingface_hub`` is imported when a Hub id is looked up. No other reasonrl
module is imported: ``reasonrl.config`` builds the driver's resolution and pinning on this module, and
``reasonrl.distributed`` calls it inside the actors (``distributed/`` never imports ``config/``).
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # owner/name, as the Hub spells repository ids
COMMIT = re.compile(r"[0-9a-f]{40}")  # a full commit sha: the only revision that never moves

SHARED_CACHE_ADVICE = (
    "or give every node one shared cache: HF_HOME (or HF_HUB_CACHE) pointing at a file system all nodes mount, set "
    "in the environment of `ray start` on each node"
)


class ModelNotOnNodeError(FileNotFoundError):
    """A model an actor is about to load is not on its node (not in that node's HF cache, or no such folder
    there); the message says which node, which model and what to do."""


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
    ``main``), else None. Local paths are not excluded here: an existing local path wins where it is looked up."""
    repo_id, sep, revision = value.partition("@")
    if not HUB_ID.fullmatch(repo_id) or (sep and not revision):
        return None
    return repo_id, (revision or None)


def is_commit(revision: str | None) -> bool:
    """Whether ``revision`` is a full commit sha (40 hex digits), the one kind of revision that cannot move."""
    return revision is not None and COMMIT.fullmatch(revision) is not None


def snapshot_commit(folder: str | os.PathLike) -> str | None:
    """The commit of a snapshot folder of the Hub cache (``.../snapshots/<commit>``), or None if it is not one."""
    name = Path(folder).name
    return name if is_commit(name) else None


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of ``repo_id`` at ``revision`` (default ``main``) in this process's Hub cache, if it is
    there, complete as far as the cache knows, and holds config.json; never touches the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(repo_id, revision=revision, cache_dir=hub_cache_dir(), local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError, OSError):  # IncompleteSnapshotError is a LocalEntryNotFound
        return None
    return Path(folder) if (Path(folder) / "config.json").is_file() else None


def node_name() -> str:
    """This machine as messages name it (its host name)."""
    return socket.gethostname()


def download_command(repo_id: str, revision: str | None, cache: str | os.PathLike | None = None) -> str:
    """The ``hf`` command that puts ``repo_id`` at ``revision`` into ``cache`` (this process's cache by default)."""
    rev = f" --revision {revision}" if revision else ""
    return f"hf download {repo_id}{rev} --cache-dir {cache if cache is not None else hub_cache_dir()}"


def local_model_folder(source: str, *, where: str | None = None) -> str:
    """The local folder to load ``source`` from, in this process, on this node.

    ``source`` is what the driver sends to the actors: a Hub id (pinned: ``owner/name@<commit>``; an unpinned one
    works too, at whatever its revision names here) or a local folder. A Hub id becomes its snapshot folder in this
    node's HF cache; a node that lacks it downloads it first when online (``HF_HUB_OFFLINE`` unset), else
    :class:`ModelNotOnNodeError`. An existing local path is returned as it is; a missing one raises
    :class:`ModelNotOnNodeError` too (a folder must exist at the same path on every node that loads it).
    ``where`` names this node in messages (default: its host name)."""
    where = where or f"node {node_name()}"
    path = Path(source).expanduser()
    hub = split_hub_id(source)
    if hub is None or path.exists():
        if not path.exists():
            raise ModelNotOnNodeError(
                f"model folder {source} does not exist on {where}: a local folder must be at the same path on every "
                "node that loads it (copy it there, or put it on a file system every node mounts), or give a Hub id "
                "(owner/name) so that each node loads it from its own HF cache"
            )
        return str(path)
    repo_id, revision = hub
    folder = cached_snapshot(repo_id, revision)
    if folder is not None:
        return str(folder)
    cache, offline = hub_cache_dir(), hub_offline()
    problem = f"{source} is not in the HF cache {cache} of {where}"
    if offline:
        problem += " and HF_HUB_OFFLINE=1 there forbids downloading it"
    else:
        from huggingface_hub import snapshot_download

        try:
            return snapshot_download(repo_id, revision=revision, cache_dir=cache)
        except (OSError, ValueError) as error:  # no network, unknown repo or revision, gated, HTTP errors
            first_line = (str(error).splitlines() or [""])[0]
            problem += f" and downloading it there failed ({type(error).__name__}: {first_line})"
    raise ModelNotOnNodeError(
        f"{problem}: download it into that cache first, `{download_command(repo_id, revision, cache)}` on that node "
        f"(the cache as the Ray node sees it), {SHARED_CACHE_ADVICE}"
    )

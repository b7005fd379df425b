"""Which attention backend a model runs with, decided in the process that runs it.

``attn_implementation`` is a user's choice (``auto``, ``flash_attention_2``, ``sdpa``, ``eager``) that travels
unresolved to every worker; each worker resolves it with :func:`resolve_attn_implementation` from ITS placement
device, dtype and whether ``flash_attn`` imports THERE (:func:`flash_attn_import_error`). Deciding in the driver gave
a GPU-less head node without flash-attn sdpa, and so no packing, on GPU workers that had it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

FLASH_ATTENTION = "flash_attention_2"


def is_flash(attn_implementation: str | None) -> bool:
    """Whether a (resolved) backend runs flash-attention kernels: the varlen ones take ``cu_seqlens``."""
    return "flash" in (attn_implementation or "").lower()


@functools.cache
def flash_attn_import_error() -> str | None:
    """``None`` when the ``flash_attn`` package imports in this process, else why not (the exception, one line).

    An import, not only a look-up of the package: an install built for another CUDA or torch is found but fails to
    load its extension. Cached: a process asks once."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        return "the flash_attn package is not installed"
    try:
        importlib.import_module("flash_attn")
    except Exception as err:  # ImportError, OSError (a CUDA library), RuntimeError: all mean "not usable here"
        return f"import flash_attn failed: {type(err).__name__}: {err}"
    return None


def resolve_attn_implementation(
    choice: str,
    device: str,
    bf16: bool,
    flash_available: bool,
    *,
    where: str = "this process",
    flash_error: str | None = None,
) -> str:
    """The backend a model really loads with, for one process.

    Args:
        choice: the user's ``attn_implementation``: ``auto``, ``flash_attention_2``, ``sdpa``, ``eager`` (any
            other transformers name passes through unchanged).
        device: ``"gpu"`` or ``"cpu"``: the device this process is placed on.
        bf16: whether the model runs in bfloat16 (flash-attention rejects float32 inputs).
        flash_available: whether ``flash_attn`` imports in this process.
        where: names the process in errors (a worker passes its node and rank).
        flash_error: why ``flash_attn`` is unavailable, appended to the error.

    Returns:
        ``auto`` -> ``flash_attention_2`` on a GPU in bf16 with ``flash_attn`` importable, else ``sdpa``; an explicit
        choice is kept.

    Raises:
        ValueError: ``flash_attention_2`` chosen explicitly where it cannot run (a CPU placement, float32, or no
            importable ``flash_attn`` on this node); the message names the field and ``where``.
    """
    if choice == "auto":
        return FLASH_ATTENTION if device == "gpu" and bf16 and flash_available else "sdpa"
    if choice == FLASH_ATTENTION:
        problem = fix = None
        if device != "gpu":
            problem, fix = f"needs a GPU, and {where} is placed on {device}", "use attn_implementation=auto or sdpa"
        elif not bf16:
            problem = f"runs in bf16/fp16 only, and {where} runs in float32 (bf16=false)"
            fix = "set bf16=true, or attn_implementation=auto (sdpa in float32)"
        elif not flash_available:
            reason = f" ({flash_error})" if flash_error else ""
            problem = f"needs the flash_attn package, which does not import on {where}{reason}"
            fix = "install flash-attn on every GPU node, or set attn_implementation=auto (flash-attention where it "
            fix += "imports, sdpa elsewhere) or sdpa"
        if problem:
            raise ValueError(f"attn_implementation='{FLASH_ATTENTION}' {problem}: {fix}")
    return choice


def attention_summary(role: str, reports: Sequence[Mapping[str, Any]]) -> str:
    """One log line from the workers' own reports of what they run (``_ModelWorker.attention``): the resolved
    backend, layout and device per distinct answer, with the ranks that gave it (nodes may differ). Why ``auto``
    gave no flash-attention on a GPU is added (``flash_attn_error``)."""
    by_answer: dict[tuple, list[int]] = {}
    for rank, report in enumerate(reports):
        error = report.get("flash_attn_error") if report["device"] == "gpu" else None
        impl = report["attn_implementation"]
        if report.get("sequence_parallel_ranks"):  # Ulysses around that core, the sequence split over N ranks
            impl = f"Ulysses over {report['sequence_parallel_ranks']} ranks around {impl}"
        key = (impl, bool(report["packing"]), report["device"], error)
        by_answer.setdefault(key, []).append(rank)
    requested = reports[0]["requested"] if reports else "?"
    parts = []
    for (impl, packing, device, error), ranks in by_answer.items():
        which = "all ranks" if len(by_answer) == 1 else f"ranks {ranks}"
        why = f"; flash_attn: {error}" if error and requested == "auto" and not is_flash(impl) else ""
        parts.append(f"{impl}, {'packed' if packing else 'padded'} micro-batches ({which} on {device}{why})")
    return f"{role}: attention {' | '.join(parts)} [attn_implementation={requested}, resolved on each worker]"

"""The attention backend and micro-batch layout of one DeepSpeed worker, decided in the worker itself.

The driver cannot know them: whether ``flash_attn`` imports, and on which device a worker runs, are facts of the
worker's node and placement (a GPU-less head node without flash-attn drives GPU workers that have it). The worker
config carries the user's choice unresolved; :func:`resolve_here` applies ``reasonrl.models``' pure rules to this
process's placement (:func:`reasonrl.distributed.platform.placed_device`), dtype and ``import flash_attn``.
"""

from __future__ import annotations

from typing import Any

from reasonrl.distributed.platform import placed_device


def node_address() -> str:
    """This node's IP as Ray knows it (the host name outside Ray)."""
    import ray

    if ray.is_initialized():
        return ray.util.get_node_ip_address()
    import socket

    return socket.gethostname()


def resolve_here(choice: str, bf16: bool, packing: str, who: str) -> dict[str, Any]:
    """What this process runs, as the report the driver logs (``reasonrl.models.attention_summary``):
    ``requested`` (the user's choice), ``attn_implementation`` (resolved here), ``packing`` (bool, decided from
    it with the mode ``packing``: off / auto / on), ``device``, ``node`` and ``flash_attn_error`` (why flash_attn
    does not import here; probed only for a choice that may run it).

    Raises ValueError, naming the field, the node and ``who`` (e.g. ``PolicyWorker rank 3``), for an explicit
    ``flash_attention_2`` that cannot run here."""
    from reasonrl.models import decide_packing, flash_attn_import_error, resolve_attn_implementation

    device, node = placed_device(), node_address()
    flash_error = flash_attn_import_error() if choice in ("auto", "flash_attention_2") else None
    resolved = resolve_attn_implementation(
        choice, device, bf16, flash_error is None, where=f"node {node} ({who})", flash_error=flash_error
    )
    return {
        "requested": choice,
        "attn_implementation": resolved,
        "packing": decide_packing(packing, resolved),
        "device": device,
        "node": node,
        "flash_attn_error": flash_error,
    }

"""The weight-broadcast process group: policy rank 0 plus every vLLM worker, outside both of their own groups.

The policy ranks already form DeepSpeed's default process group and each vLLM engine has its own (tensor
parallelism), so the sync group is a standalone c10d group built on its own ``TCPStore`` (torch's public
``ProcessGroupGloo`` / ``ProcessGroupNCCL`` classes): it touches neither default group. Rank 0 (the policy's rank 0)
hosts the store and is the broadcast root; engine ``e``'s worker ``w`` is rank ``1 + e * tp + w``.

Bucket wire format: the tensors of one bucket travel as one flat buffer per dtype (in the order of
:func:`bucket_layout`), so one broadcast per dtype moves a whole bucket; the receivers cut the same views back out.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import torch

# (name, shape, dtype name) of each tensor of a bucket, in send order.
BucketLayout = list[tuple[str, tuple[int, ...], str]]


def create_group(address: str, port: int, rank: int, world_size: int, backend: str, timeout_s: float = 600):
    """Join the sync group (rank 0 creates the store and waits for the others). Returns the process group.

    ``backend``: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors; every rank on its own GPU: NCCL refuses two
    ranks on one device, so a colocated engine cannot join, see ``resolve_sync_transport``).
    """
    import torch.distributed as dist

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"sync group backend must be 'gloo' or 'nccl', got {backend!r}")
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(address, port, world_size, rank == 0, timeout=timeout)
    store = dist.PrefixStore("reasonrl-weight-sync", store)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, world_size, options)


def broadcast(group, tensor: torch.Tensor) -> None:
    """Broadcast ``tensor`` in place from rank 0 of ``group`` (blocks until done)."""
    post_broadcast(group, tensor).wait()


def post_broadcast(group, tensor: torch.Tensor):
    """Start broadcasting ``tensor`` in place from rank 0 of ``group``; returns the work (``.wait()`` blocks until
    done). The process group runs it on its own threads (gloo) or stream (NCCL), so the caller can compute
    meanwhile; a group runs its operations in the order they were posted."""
    import torch.distributed as dist

    options = dist.BroadcastOptions()
    options.rootRank = 0
    return group.broadcast([tensor], options)


def bucket_layout(named_tensors: Sequence[tuple[str, torch.Tensor]]) -> BucketLayout:
    """What the receivers need to rebuild a bucket: ``(name, shape, dtype)`` per tensor, in send order."""
    return [(name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in named_tensors]


def _dtype_groups(layout: BucketLayout) -> dict[str, list[int]]:
    """Indices of the layout's tensors per dtype, dtypes in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for i, (_, _, dtype) in enumerate(layout):
        groups.setdefault(dtype, []).append(i)
    return groups


def pack(named_tensors: Sequence[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    """One flat buffer per dtype (``_dtype_groups`` order): the bucket's tensors, flattened and concatenated.

    Tensors that already are consecutive views of one flat buffer (what ``deepspeed_engine.gather_params``
    returns over gloo) are sent as that buffer, without a copy.
    """
    layout = bucket_layout(named_tensors)
    buffers = []
    for indices in _dtype_groups(layout).values():
        tensors = [named_tensors[i][1] for i in indices]
        shared = _shared_flat_buffer(tensors)
        buffers.append(shared if shared is not None else torch.cat([t.reshape(-1) for t in tensors]))
    return buffers


def _shared_flat_buffer(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The 1-D buffer the tensors tile exactly, in order (contiguous views of one storage from offset 0 to its
    end), or None."""
    first = tensors[0]
    storage = first.untyped_storage()
    expected_offset = 0
    for t in tensors:
        same = t.untyped_storage().data_ptr() == storage.data_ptr() and t.dtype == first.dtype
        if not (same and t.is_contiguous() and t.storage_offset() == expected_offset):
            return None
        expected_offset += t.numel()
    if expected_offset * first.element_size() != storage.nbytes():
        return None
    return torch.empty(0, dtype=first.dtype, device=first.device).set_(storage, 0, (expected_offset,))


def empty_buffers(layout: BucketLayout, device: Any) -> list[torch.Tensor]:
    """Receive buffers matching :func:`pack` of a bucket with this layout."""
    buffers = []
    for dtype, indices in _dtype_groups(layout).items():
        size = sum(numel(layout[i][1]) for i in indices)
        buffers.append(torch.empty(size, dtype=getattr(torch, dtype), device=device))
    return buffers


def unpack(layout: BucketLayout, buffers: Sequence[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` views into the flat buffers, in layout order (the inverse of :func:`pack`)."""
    out: list[tuple[str, torch.Tensor] | None] = [None] * len(layout)
    for buffer, indices in zip(buffers, _dtype_groups(layout).values(), strict=True):
        offset = 0
        for i in indices:
            name, shape, _ = layout[i]
            size = numel(shape)
            out[i] = (name, buffer[offset : offset + size].view(shape))
            offset += size
        if offset != buffer.numel():
            raise ValueError(f"sync bucket buffer holds {buffer.numel()} elements, the layout {offset}")
    return out  # type: ignore[return-value]


def buffer_dtypes(layout: BucketLayout) -> list[str]:
    """The dtype of each flat buffer of a bucket with this layout, in :func:`pack` order."""
    return list(_dtype_groups(layout))


def to_bytes(buffer: torch.Tensor) -> bytes:
    """A flat CPU buffer's raw bytes (any dtype, bf16 included)."""
    return buffer.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def from_bytes(blob: bytes, dtype: str) -> torch.Tensor:
    """The inverse of :func:`to_bytes` (a writable copy)."""
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).view(getattr(torch, dtype))


def numel(shape: Sequence[int]) -> int:
    """Elements of a tensor of this shape."""
    n = 1
    for d in shape:
        n *= int(d)
    return n

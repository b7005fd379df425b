"""Gathering full parameters without DeepSpeed calls: the point-to-point gather of flat partitions to rank 0, the
split of ``(item, bytes)`` lists into buckets, and a module's persistent buffers.

The DeepSpeed adapter (:func:`reasonrl.distributed.deepspeed_engine.gather_params`) reads the ZeRO-3 partitions of
the parameters into :class:`FlatPartition` s and, where it pays (:func:`gather_to_rank0_pays`), hands them to
:func:`gather_partitions_to_rank0`, which only uses ``torch.distributed``.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class FlatPartition:
    """This rank's partition of one parameter in the flat layout: rank ``r`` holds elements ``[r * size,
    (r + 1) * size)`` of the flattened full parameter (``size = local.numel()``, the same on every rank; the end of
    the last partitions is padding)."""

    local: Any  # (size,) this rank's partition, padding included
    numel: int  # elements of the full parameter
    shape: tuple[int, ...]  # shape of the full parameter

    def valid(self, rank: int) -> int:
        """Elements of rank ``rank``'s partition inside the parameter (the rest is padding)."""
        size = self.local.numel()
        return max(0, min(size, self.numel - rank * size))


def gather_to_rank0_pays() -> bool:
    """Gather partitions straight to rank 0 (point-to-point) instead of an all-gather?

    Only over gloo with more than one rank: there an all-gather moves every byte to every rank and measured 2.7x
    slower than a gather to one rank (513 MiB over 2 CPU ranks: 0.75 s vs 0.28 s). NCCL keeps the all-gather (its
    fastest collective; a gather is point-to-point there).
    """
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_backend() == "gloo" and dist.get_world_size() > 1


def gather_partitions_to_rank0(parts: list[FlatPartition]) -> list[Any] | None:
    """Full copies of partitioned parameters on rank 0: every other rank sends each partition point-to-point,
    received straight into its place in one flat buffer (no concatenation on the senders, no reshuffle on rank 0,
    nothing sent to itself). Collective: every rank calls it with its own partitions of the same parameters, all of
    one dtype. Returns the tensors (rank 0, on the partitions' device) or ``None`` elsewhere.

    The tensors returned are consecutive views of that flat buffer, which a transport can send as one buffer
    without packing it again.
    """
    import torch
    import torch.distributed as dist

    world, rank = dist.get_world_size(), dist.get_rank()
    if rank != 0:
        sends = [
            dist.isend(part.local.detach().reshape(-1)[: part.valid(rank)], dst=0, tag=i)
            for i, part in enumerate(parts)
            if part.valid(rank)
        ]
        for work in sends:
            work.wait()
        return None
    dtype, device = parts[0].local.dtype, parts[0].local.device
    flat = torch.empty(sum(part.numel for part in parts), dtype=dtype, device=device)
    full, receives, offset = [], [], 0
    for i, part in enumerate(parts):
        dst = flat[offset : offset + part.numel]  # rank r's partition is elements [r * size, r * size + valid)
        size = part.local.numel()
        for r in range(1, world):
            if part.valid(r):
                receives.append(dist.irecv(dst[r * size : r * size + part.valid(r)], src=r, tag=i))
        dst[: part.valid(0)].copy_(part.local.detach().reshape(-1)[: part.valid(0)])
        full.append(dst.view(part.shape))
        offset += part.numel
    for work in receives:
        work.wait()
    return full


def split_by_size(items: list[tuple[Any, int]], limit: int) -> list[list[Any]]:
    """Split ``(item, size in bytes)`` pairs, in order, into consecutive groups whose sizes sum to <= ``limit``;
    an item larger than ``limit`` forms its own group. Used for gather buckets and for export shards."""
    groups: list[list[Any]] = []
    size = 0
    for item, nbytes in items:
        if not groups or size + nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += nbytes
    return groups


def persistent_buffer_names(module) -> list[str]:
    """Names of the buffers ``module.state_dict()`` would contain (non-persistent ones excluded)."""
    names = []
    for prefix, sub in module.named_modules():
        for name, buf in sub._buffers.items():
            if buf is not None and name not in sub._non_persistent_buffers_set:
                names.append(f"{prefix}.{name}" if prefix else name)
    return names


def persistent_buffers(module) -> dict[str, Any]:
    """The buffers ``module.state_dict()`` would contain (non-persistent ones excluded), as CPU tensors."""
    return {name: module.get_buffer(name).detach().cpu().clone() for name in persistent_buffer_names(module)}

"""Sharding: a step's samples cut into one part per data-parallel rank, and the ranks' outputs put back together.

The one place where the driver's batch order meets the ranks' shards:

* :func:`token_balanced_shards`: which samples each rank gets (equal counts, nearly equal tokens);
* :func:`rank_shards`: each rank's :class:`~reasonrl.dataplane.experience.RaggedShard` of an
  :class:`~reasonrl.dataplane.experience.Experience` (token ids only for the forwards, with every per-token field
  for the updates), handed to ``put`` once (the role handles put them in Ray's object store, so one shard can go to
  several roles of the same world size and several calls);
* :meth:`RankShards.stitch`: the ranks' flat per-response-token outputs back into one ``[batch, T]`` tensor;
* :func:`flatten_padded` / :func:`padded_from_flat`: ``[n, T]`` right-padded rows <-> the flat per-response-token
  values that travel.

Torch only; what ``put`` returns (an object ref, or the shard itself in-process) is opaque here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from reasonrl.dataplane.experience import Experience


@dataclasses.dataclass(frozen=True)
class RankShards:
    """One batch cut over ``world_size`` ranks.

    Attributes:
        indices: ``indices[r]``: the batch positions of rank ``r``'s samples, ascending.
        payloads: ``payloads[r]``: what travels to rank ``r`` (its ``RaggedShard``, or an object ref of it).
        lengths: response tokens of every sample of the batch, ``[batch]`` (int64).
        width: ``T`` of the batch's ``[batch, T]`` tensors (its longest response).
    """

    indices: list[list[int]]
    payloads: list[Any]
    lengths: torch.Tensor
    width: int

    @property
    def world_size(self) -> int:
        return len(self.indices)

    def sizes(self) -> list[int]:
        """Samples per rank."""
        return [len(idx) for idx in self.indices]

    def stitch(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """The ranks' flat outputs (``parts[r]``: float ``[response tokens of rank r's samples]``, in its shard's
        order) -> ``[batch, width]``, zeros at padding. ``ValueError`` when a part does not match its shard."""
        if len(parts) != self.world_size:
            raise ValueError(f"{len(parts)} outputs for {self.world_size} ranks")
        for rank, (part, idx) in enumerate(zip(parts, self.indices, strict=True)):
            expected = int(self.lengths[list(idx)].sum()) if idx else 0
            if part.numel() != expected:
                raise ValueError(f"rank {rank}: {part.numel()} output values for {expected} response tokens")
        return stitch_rank_outputs(parts, self.lengths, self.width, self.indices)


def rank_shards(
    exp: Experience, world_size: int, *, with_fields: bool, put: Callable[[list], list] = list
) -> RankShards:
    """``exp`` cut over ``world_size`` ranks (:func:`token_balanced_shards` of prompt + response tokens), each
    rank's ``RaggedShard`` (token ids only, or with every per-token field: ``Experience.ragged``) given to ``put``
    once, all together (``put(shards) -> payloads``, one per rank)."""
    indices = exp.shard_indices(world_size)
    lengths = torch.tensor([len(r) for _, r in exp.samples], dtype=torch.long)
    payloads = put([exp.ragged(idx, with_fields=with_fields) for idx in indices])
    return RankShards(indices, list(payloads), lengths, int(exp.action_mask.shape[1]))


def stitch_rank_outputs(
    parts: Sequence[torch.Tensor], lengths: torch.Tensor, width: int, shards: Sequence[Sequence[int]]
) -> torch.Tensor:
    """Per-rank flat outputs (float ``[sum of the rank's response lengths]``) -> one ``[batch, width]`` tensor,
    rank i's rows at ``shards[i]``, zeros at padding. ``lengths``: response tokens per sample, ``[batch]``."""
    out = torch.zeros(len(lengths), width)
    for part, idx in zip(parts, shards, strict=True):
        if idx:
            out[list(idx)] = padded_from_flat(part, lengths[list(idx)], width)
    return out


def token_balanced_shards(lengths: Sequence[int], num_shards: int) -> list[list[int]]:
    """Split samples over ``num_shards`` data-parallel ranks with equal counts (sizes differ by at most one) and
    nearly equal tokens, so no rank waits on another holding all the long chains of thought.

    Greedy longest-first: each sample, longest first, goes to the rank with the fewest tokens among those with room
    left (the first ``len % num_shards`` ranks hold one sample more). Deterministic (ties by index). The loss is
    normalised by global token/sequence counts, so which rank holds a sample changes only the float summation order.

    Args:
        lengths: tokens per sample (prompt + response), ``[batch]``.
    Returns:
        ``num_shards`` lists of sample indices, each in ascending (batch) order; together a partition of the batch.
    """
    if num_shards <= 0:
        raise ValueError(f"num_shards must be > 0, got {num_shards}")
    base, extra = divmod(len(lengths), num_shards)
    room = [base + (1 if s < extra else 0) for s in range(num_shards)]
    tokens = [0] * num_shards
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    for i in sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i)):
        s = min((s for s in range(num_shards) if room[s]), key=lambda s: (tokens[s], s))
        shards[s].append(i)
        tokens[s] += int(lengths[i])
        room[s] -= 1
    return [sorted(shard) for shard in shards]


def flatten_padded(padded: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """``[n, T]`` right-padded rows -> float32 ``[sum_i lengths[i]]``: the first ``lengths[i]`` values of each row."""
    lengths = lengths.long()
    width = int(lengths.max()) if len(lengths) else 0
    if width > padded.shape[1]:
        raise ValueError(f"rows of {padded.shape[1]} columns for responses of up to {width} tokens")
    mask = torch.arange(width)[None, :] < lengths[:, None]
    return padded[:, :width][mask].to(torch.float32)


def padded_from_flat(flat: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """Inverse of :func:`flatten_padded`: float32 ``[sum_i lengths[i]]`` -> ``[n, width]``, zeros at padding (values
    past ``width`` are cut)."""
    lengths = lengths.long()
    full = max(int(lengths.max()) if len(lengths) else 0, width)
    out = torch.zeros(len(lengths), full, dtype=torch.float32)
    out[torch.arange(full)[None, :] < lengths[:, None]] = flat.to(torch.float32).reshape(-1)
    return out[:, :width]

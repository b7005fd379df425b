"""Ulysses sequence parallelism in the PPO workers: SP process groups and "group rounds" (docs/distributed.md).

With ``sequence_parallel_size`` = N > 1 the W ranks of a role form W / N SP groups of N consecutive ranks. The
driver's sharding is unchanged (one shard per rank). Inside a group, every micro-batch index i runs in N rounds:
round j runs member j's micro-batch i on all N ranks (its samples, and for an update its per-token fields,
exchanged within the group first), each rank computing S/N of its positions
(``reasonrl.models.sequence_parallel``). Each rank keeps the outputs and metrics of its OWN round only.

Micro-batch counts are already equal on every rank of the role (``equalised_micro_batches`` all-reduces the MAX
over the whole role): a member without a micro-batch i contributes its zero-weighted dummy (payload None), whose
outputs are discarded and whose loss weight is 0. So every rank runs the same number of forwards (ZeRO-3 gathers
parameters collectively over the whole role).

Loss scaling in an update: every rank backpropagates round j's loss (normalised by the global token count) times
W; DeepSpeed averages over the W ranks, which sums each micro-batch's N shares to its full gradient (the gather's
backward hands each rank the gradient of its own positions) and adds the micro-batches once each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch.distributed as dist
from loguru import logger


@dataclasses.dataclass
class Round:
    """One forward of a group round: member ``member``'s micro-batch ``index``, run on every rank of the group."""

    index: int  # micro-batch index (the same on every rank)
    member: int  # whose micro-batch (rank within the SP group)
    samples: list  # its samples (``[DUMMY_SAMPLE]`` for a member without micro-batch ``index``)
    payload: Any  # what the member sent along (indices, an Experience slice, ...); None for a dummy
    own: bool  # member == this rank: its outputs and metrics are kept here
    last: bool  # the last round of the call (the gradient-accumulation boundary of an update)


def new_sp_groups(world_size: int, size: int, rank: int):
    """The SP process group of ``rank``: ranks [k N, (k+1) N) form group k. Collective over the role: every rank
    creates every group, in the same order (``torch.distributed.new_group``'s rule). Returns this rank's group."""
    if size < 1 or world_size % size:
        raise ValueError(f"sequence_parallel_size={size} must divide the role's {world_size} ranks")
    mine = None
    for start in range(0, world_size, size):
        ranks = list(range(start, start + size))
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = group
    return mine


def setup_sequence_parallel(worker, model):
    """A PPO worker's SP setup (``worker.config.sequence_parallel_size`` = N): None at N = 1; else ``model`` (the
    transformers model whose attention runs: the engine's module, the critic's backbone) switched to Ulysses attention
    around the worker's resolved core, and this rank's SP group (:func:`new_sp_groups`, collective over the role).
    Refuses a vision-language model and LoRA adapters; a worker that resolved flash-attention runs the sdpa core
    (no flash-attention varlen core yet)."""
    size = worker.config.sequence_parallel_size
    if size == 1:
        return None
    name = f"{type(worker).__name__} rank {worker.rank}: sequence_parallel_size={size}"
    if worker.vision is not None:
        raise ValueError(f"{name} does not serve vision-language models (the vision tower needs the whole sequence)")
    if worker.config.lora_rank:
        raise ValueError(
            f"{name} does not serve LoRA adapters yet (the SP forward reads the base model's hidden states)"
        )
    core = worker.attn_implementation if worker.attn_implementation in ("sdpa", "eager") else "sdpa"
    if core != worker.attn_implementation:
        logger.warning(f"{name}: Ulysses has no {worker.attn_implementation!r} core yet; its attention runs sdpa")
    from reasonrl.models.ulysses_attention import check_heads, use_ulysses_attention

    check_heads(model.config, size)
    use_ulysses_attention(model, core)
    return new_sp_groups(worker.world_size, size, worker.rank)


def group_rounds(
    micro_batches: Sequence[tuple[list[int], list, Any]],
    group,
    payload: Callable[[list[int], list], Any] | None = None,
) -> Iterator[Round]:
    """The rounds of this rank's ``micro_batches`` (``(indices, samples, images)`` each, equal counts on every rank
    of the role) over its SP ``group`` (module docstring).

    ``payload(indices, samples)`` is what a member sends with a real micro-batch (default: its ``indices``); it is
    None for a dummy (empty ``indices``). Samples and payload are exchanged with ``all_gather_object`` within the
    group, one exchange per micro-batch index."""
    me, size = dist.get_rank(group), dist.get_world_size(group)
    for i, (idx, samples, _images) in enumerate(micro_batches):
        sent = (list(samples), (payload(idx, samples) if payload is not None else list(idx)) if idx else None)
        members: list[Any] = [None] * size
        dist.all_gather_object(members, sent, group=group)
        for j, (member_samples, member_payload) in enumerate(members):
            last = i == len(micro_batches) - 1 and j == size - 1
            yield Round(i, j, member_samples, member_payload, j == me, last)

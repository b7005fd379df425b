"""The tensors one PPO/GRPO update needs, sliced per data-parallel rank and per micro-batch.

A rollout gives, per sample, its prompt and response token ids. Scoring and the forward passes add per-token
tensors aligned with the response tokens. All token tensors are ``[batch, T]`` with ``T`` the longest response of
the batch, right-padded, and ``action_mask`` marks real response tokens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

Sample = tuple[list[int], list[int]]  # (prompt token ids, response token ids)

TOKEN_FIELDS = ("action_mask", "old_logprobs", "advantages", "ref_logprobs", "old_values", "returns")


@dataclasses.dataclass
class Experience:
    """Inputs of the policy and critic updates for a set of samples.

    Attributes:
        samples: ``(prompt_ids, response_ids)`` per sample.
        action_mask: [batch, T] bool, True on real response tokens.
        old_logprobs: [batch, T] log-probs of the rollout policy (the PPO ratio's denominator).
        advantages: [batch, T].
        ref_logprobs: [batch, T] reference log-probs (needed for a KL loss), or None.
        old_values: [batch, T] critic values at rollout time (value clipping), or None.
        returns: [batch, T] critic targets, or None.
    """

    samples: list[Sample]
    action_mask: torch.Tensor
    old_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def select(self, indices: Sequence[int], width: int | None = None) -> Experience:
        """The sub-batch ``indices``, token tensors cut to ``width`` columns (default: its longest response)."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        samples = [self.samples[i] for i in indices]
        width = width if width is not None else max((len(s[1]) for s in samples), default=0)
        fields = {}
        for name in TOKEN_FIELDS:
            value = getattr(self, name)
            fields[name] = None if value is None else value[idx, :width]
        return Experience(samples=samples, **fields)

    def shard(self, num_shards: int) -> list[Experience]:
        """One part per data-parallel rank, balanced by tokens (:func:`token_balanced_shards`)."""
        return [self.select(idx) for idx in self.shard_indices(num_shards)]

    def shard_indices(self, num_shards: int) -> list[list[int]]:
        """The sample indices of each rank's part (:meth:`shard`), each list in batch order."""
        return token_balanced_shards([len(p) + len(r) for p, r in self.samples], num_shards)

    def num_tokens_and_seqs(self) -> tuple[int, int]:
        """(valid response tokens, non-empty sequences): the global counts of loss aggregation."""
        mask = self.action_mask.bool()
        return int(mask.sum()), int(mask.any(dim=-1).sum())


def padded_from_rows(rows: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    """List of per-sample lists -> right-padded [batch, width] float tensor."""
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(list(row)[:width], dtype=torch.float32)
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

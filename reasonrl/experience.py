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
        """Split into ``num_shards`` contiguous, nearly equal parts (one per data-parallel rank)."""
        bounds = [round(i * len(self) / num_shards) for i in range(num_shards + 1)]
        return [self.select(range(bounds[i], bounds[i + 1])) for i in range(num_shards)]

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

"""The tensors one PPO/GRPO update needs, sliced per data-parallel rank and per micro-batch.

A rollout gives, per sample, its prompt and response token ids. Scoring and the forward passes add per-token
tensors aligned with the response tokens. On the driver all token tensors are ``[batch, T]`` with ``T`` the longest
response of the batch, right-padded (:class:`Experience`).

Two masks, never confused:

* the response span: token ``t`` of sample ``i`` is a response token iff ``t < R_i`` (``R_i = len(response_i)``).
  Forward passes (log-probs, values) run over the whole span; it follows from the samples, no tensor carries it.
* the loss mask (``Experience.action_mask``): the response tokens that are trained on, a subset of the span. It may
  have holes inside a response (tool output, an environment's observation in a multi-turn response: tokens the
  policy did not sample), and may end before the span does. Everything downstream uses this one mask: advantages
  (GAE skips the masked tokens, ``reasonrl.algos.advantages``), whitening, the KL penalty, policy / value / KL /
  entropy losses, rollout-policy correction, and the token and sequence counts of loss aggregation. Without holes
  (today's single-turn rollouts) it equals the span.

What travels to the workers is :class:`RaggedShard`: one rank's samples with no padding and no Python lists (flat
int32 token ids, int32 lengths, flat float32 per-token fields over the response tokens only, and the loss mask over
the response tokens when it differs from the span), sent once per step.

Data plane: the loop (:mod:`reasonrl.loop`) builds these, the workers (:mod:`reasonrl.distributed.ppo_workers`) read
them; this module imports neither (torch and numpy only). Cutting a step into the ranks' shards and putting their
outputs back together is :mod:`reasonrl.dataplane.sharding`; the mini-batch plan of a step is the loop's
(:mod:`reasonrl.loop.mini_batches`).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
import torch

from reasonrl.dataplane.sharding import flatten_padded, padded_from_flat, token_balanced_shards

Sample = tuple[list[int], list[int]]  # (prompt token ids, response token ids)

TOKEN_FIELDS = (
    "action_mask",
    "old_logprobs",
    "advantages",
    "ref_logprobs",
    "old_values",
    "returns",
    "rollout_logprobs",
)
FLOAT_FIELDS = TOKEN_FIELDS[1:]  # the per-token values; the action mask follows from the response lengths


@dataclasses.dataclass
class Experience:
    """Inputs of the policy and critic updates for a set of samples.

    Attributes:
        samples: ``(prompt_ids, response_ids)`` per sample.
        action_mask: [batch, T] bool, the loss mask: True on the response tokens trained on. False on padding
            (``t >= R_i``) and on masked tokens inside a response (holes: tool output); see the module docstring.
        old_logprobs: [batch, T] log-probs of the rollout policy (the PPO ratio's denominator).
        advantages: [batch, T].
        ref_logprobs: [batch, T] reference log-probs (needed for a KL loss), or None.
        old_values: [batch, T] critic values at rollout time (value clipping), or None.
        returns: [batch, T] critic targets, or None.
        rollout_logprobs: [batch, T] the rollout engine's log-probs of the sampled tokens (rollout-policy
            correction, ``rollout_correction``), or None.
        teacher_logprobs: [batch, T] the distillation teacher's log-probs of the sampled tokens
            (``teacher_pretrain``), or None. Read on the driver by the advantages only: not a ``TOKEN_FIELDS``
            entry, so never cut into shards nor sent to a worker.
        images: per sample, the images of its prompt (uint8 ``[H, W, 3]`` arrays in prompt order) for a
            vision-language model's forward passes, or None for a text run. The prompt ids hold the expanded image
            tokens (``reasonrl.models.vision``).
    """

    samples: list[Sample]
    action_mask: torch.Tensor
    old_logprobs: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    rollout_logprobs: torch.Tensor | None = None
    images: list[list[np.ndarray]] | None = None
    teacher_logprobs: torch.Tensor | None = None

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
        return Experience(samples=samples, images=_pick(self.images, indices), **fields)

    def shard(self, num_shards: int) -> list[Experience]:
        """One part per data-parallel rank, balanced by tokens (:func:`token_balanced_shards`)."""
        return [self.select(idx) for idx in self.shard_indices(num_shards)]

    def shard_indices(self, num_shards: int) -> list[list[int]]:
        """The sample indices of each rank's part (:meth:`shard`), each list in batch order."""
        return token_balanced_shards([len(p) + len(r) for p, r in self.samples], num_shards)

    def num_tokens_and_seqs(self) -> tuple[int, int]:
        """(loss tokens, sequences with at least one loss token): the global counts of loss aggregation."""
        mask = self.action_mask.bool()
        return int(mask.sum()), int(mask.any(dim=-1).sum())

    def loss_tokens(self) -> list[int]:
        """Loss tokens of each sample (``action_mask`` summed per row; its response length when it has no holes)."""
        return self.action_mask.bool().sum(dim=-1).tolist()

    def ragged(self, indices: Sequence[int] | None = None, *, with_fields: bool = True) -> RaggedShard:
        """The samples ``indices`` (default: all) in the wire format; ``with_fields=False``: token ids only (what
        the forwards need: they run over the whole response span).

        With the fields goes the loss mask over the response tokens (``RaggedShard.loss_mask``; None when it is the
        whole span). Values past each response are dropped; ``ValueError`` when the loss mask marks one of them.
        """
        indices = range(len(self)) if indices is None else indices
        samples = [self.samples[i] for i in indices]
        fields, loss_mask = {}, None
        if with_fields:
            idx = torch.as_tensor(list(indices), dtype=torch.long)
            lengths = torch.tensor([len(r) for _, r in samples], dtype=torch.long)
            for name in FLOAT_FIELDS:
                value = getattr(self, name)
                if value is not None:
                    fields[name] = flatten_padded(value[idx], lengths)
            loss_mask = _flat_loss_mask(self.action_mask[idx].bool(), lengths)
        return RaggedShard.from_samples(samples, fields, loss_mask, images=_pick(self.images, indices))


@dataclasses.dataclass
class RaggedShard:
    """One rank's samples of a step as they travel: no padding, no Python lists.

    With ``n`` samples of prompt lengths ``P_i`` and response lengths ``R_i``::

        tokens:           int32   [sum_i (P_i + R_i)]  prompt then response ids of sample 0, then sample 1, ...
        prompt_lengths:   int32   [n]
        response_lengths: int32   [n]
        fields[name]:     float32 [sum_i R_i]          per-token values over the response tokens only, same order
        loss_mask:        bool    [sum_i R_i] or None  the loss mask over the response tokens, same order
        images:           list [n] of lists of uint8 [H, W, 3] arrays, or None   each prompt's images (VLMs)

    ``fields`` names come from :data:`FLOAT_FIELDS`. Response token ``t`` of sample ``i`` exists iff ``t < R_i``
    (the span); ``loss_mask`` says which of them are trained on, holes allowed, and None means all of them (no
    holes: nothing more on the wire). :meth:`to_experience` rebuilds the padded :class:`Experience`; :meth:`select`
    builds the padded tensors of a micro-batch only (what a worker needs).
    """

    tokens: torch.Tensor
    prompt_lengths: torch.Tensor
    response_lengths: torch.Tensor
    fields: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    loss_mask: torch.Tensor | None = None
    images: list[list[np.ndarray]] | None = None

    @classmethod
    def from_samples(
        cls,
        samples: Sequence[Sample],
        fields: dict[str, torch.Tensor] | None = None,
        loss_mask: torch.Tensor | None = None,
        *,
        images: Sequence[Sequence[np.ndarray]] | None = None,
    ) -> RaggedShard:
        prompt_lengths = torch.tensor([len(p) for p, _ in samples], dtype=torch.int32)
        response_lengths = torch.tensor([len(r) for _, r in samples], dtype=torch.int32)
        total = int(prompt_lengths.sum()) + int(response_lengths.sum())
        ids = itertools.chain.from_iterable(itertools.chain(p, r) for p, r in samples)
        flat = np.fromiter(ids, dtype=np.int32, count=total)
        fields = {name: value.to(torch.float32) for name, value in (fields or {}).items()}
        if loss_mask is not None:
            fields["loss_mask"] = loss_mask  # checked with the fields below
        for name, value in fields.items():
            if value.shape != (int(response_lengths.sum()),):
                raise ValueError(f"{name}: shape {tuple(value.shape)}, expected ({int(response_lengths.sum())},)")
        loss_mask = fields.pop("loss_mask", None)
        loss_mask = None if loss_mask is None else loss_mask.bool()
        if images is not None and len(images) != len(samples):
            raise ValueError(f"images: {len(images)} entries for {len(samples)} samples")
        images = None if images is None else [list(i) for i in images]
        return cls(torch.from_numpy(flat), prompt_lengths, response_lengths, fields, loss_mask, images)

    def __len__(self) -> int:
        return len(self.prompt_lengths)

    @property
    def samples(self) -> list[Sample]:
        """``(prompt_ids, response_ids)`` per sample (Python lists: what the micro-batch builders take)."""
        flat = self.tokens.tolist()
        out, pos = [], 0
        for p, r in zip(self.prompt_lengths.tolist(), self.response_lengths.tolist(), strict=True):
            out.append((flat[pos : pos + p], flat[pos + p : pos + p + r]))
            pos += p + r
        return out

    def loss_tokens(self) -> torch.Tensor:
        """Loss tokens of each sample, int64 ``[n]`` (the response lengths when ``loss_mask`` is None)."""
        r_len = self.response_lengths.long()
        if self.loss_mask is None:
            return r_len
        owner = torch.repeat_interleave(torch.arange(len(r_len)), r_len)  # [sum R_i]: the sample of each token
        return torch.zeros(len(r_len), dtype=torch.long).index_add_(0, owner, self.loss_mask.long())

    def num_tokens_and_seqs(self) -> tuple[int, int]:
        """(loss tokens, responses with at least one loss token): this shard's part of the global counts of loss
        aggregation (the same numbers as :meth:`Experience.num_tokens_and_seqs` of :meth:`to_experience`)."""
        counts = self.loss_tokens()
        return int(counts.sum()), int((counts > 0).sum())

    def subset(self, indices: Sequence[int]) -> RaggedShard:
        """The samples ``indices`` (positions in this shard), still ragged."""
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        p_len, r_len = self.prompt_lengths.long(), self.response_lengths.long()
        seq_len = p_len + r_len
        tokens = _gather_segments(self.tokens, _starts(seq_len)[idx], seq_len[idx])
        fields = {name: _gather_segments(v, _starts(r_len)[idx], r_len[idx]) for name, v in self.fields.items()}
        loss_mask = None
        if self.loss_mask is not None:
            loss_mask = _gather_segments(self.loss_mask, _starts(r_len)[idx], r_len[idx])
        images = _pick(self.images, indices)
        return RaggedShard(tokens, self.prompt_lengths[idx], self.response_lengths[idx], fields, loss_mask, images)

    def to_experience(self, width: int | None = None) -> Experience:
        """The padded :class:`Experience`: ``[n, width]`` tensors (default width: the longest response),
        zeros at padding, ``action_mask`` the loss mask (the response-length prefix mask when ``loss_mask`` is
        None), False at padding. Fields not carried are None."""
        r_len = self.response_lengths.long()
        width = width if width is not None else int(r_len.max()) if len(r_len) else 0
        if self.loss_mask is None:
            mask = torch.arange(width)[None, :] < r_len[:, None]  # [n, width]
        else:
            mask = padded_from_flat(self.loss_mask, r_len, width).bool()  # [n, width], False at padding
        fields = {name: padded_from_flat(v, r_len, width) for name, v in self.fields.items()}
        return Experience(samples=self.samples, action_mask=mask, images=self.images, **fields)

    def select(self, indices: Sequence[int], width: int | None = None) -> Experience:
        """Like :meth:`Experience.select`: the padded sub-batch ``indices``, token tensors ``width`` columns wide."""
        return self.subset(indices).to_experience(width)


def _pick(images: list | None, indices: Sequence[int]) -> list | None:
    """The per-sample ``images`` entries at ``indices`` (None stays None)."""
    return None if images is None else [images[i] for i in indices]


def _flat_loss_mask(mask: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor | None:
    """The loss mask ``[n, T]`` over the response tokens, bool ``[sum_i lengths[i]]``; None when it is the whole
    span (no hole, nothing masked). ``ValueError`` when it marks a token past a response."""
    lengths = lengths.long()
    span = torch.arange(mask.shape[1])[None, :] < lengths[:, None]  # [n, T]
    if bool((mask & ~span).any()):
        rows = sorted(set((mask & ~span).nonzero()[:, 0].tolist()))
        raise ValueError(f"action_mask marks tokens past the response of rows {rows} (the loss mask is within it)")
    if bool((mask == span).all()):
        return None
    return flatten_padded(mask, lengths).bool()


def _starts(lengths: torch.Tensor) -> torch.Tensor:
    """Offset of each segment in the concatenation: exclusive cumulative sum of ``lengths`` [n] -> [n]."""
    return torch.cumsum(lengths, 0) - lengths


def _gather_segments(flat: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Concatenation of ``flat[starts[i] : starts[i] + lengths[i]]`` over ``i`` (vectorised)."""
    total = int(lengths.sum())
    within = torch.arange(total) - torch.repeat_interleave(_starts(lengths), lengths, output_size=total)
    return flat[torch.repeat_interleave(starts, lengths, output_size=total) + within]

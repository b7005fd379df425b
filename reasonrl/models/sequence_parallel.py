"""Sequence parallelism (Ulysses) for one micro-batch: shard, forward, and per-token outputs gathered back.

Every rank of an SP group of N ranks is handed the SAME micro-batch (padded or packed, ``reasonrl.models.batching``).
:func:`shard_layout` pads its rows to S = N * L positions (L = ceil(S0 / N), S0 the micro-batch width) and makes the
attention inputs explicit for the whole row: ``position_ids`` (RoPE), ``keep`` (not padding) and ``segment`` (the
packed sequence a token belongs to). Rank r runs the decoder on positions [r L, (r+1) L) only
(``reasonrl.models.ulysses_attention`` swaps to head sharding inside attention), so activations per rank are
~1/N of the sequence's.

Outputs per token are computed on the rank's L positions and gathered (:func:`gather_sequence`):

* log-probs (:func:`sp_response_logprobs`): the LM head runs only on the positions that predict a response token,
  ``chunk_size`` rows at a time and checkpointed, so no [L, vocab] logits exist beyond one chunk:
  ``log p_T(a) = z_a / T - logsumexp(z / T)`` with ``z = lm_head(h)`` [chunk, vocab];
* values (:func:`sp_response_values`): the ``CriticModel``'s forward, ``value_head(h)``.

The model is always called at its root (:func:`sp_forward`; a DeepSpeed engine's ``forward``), never a submodule.

Results are ``[batch, T]`` float32 on the response grid, zeros where ``action_mask`` is False: the same as
``reasonrl.models.logprobs.response_logprobs`` / ``reasonrl.models.critic.response_values`` at SP = 1.

Gradients. The gather's backward hands each rank the gradient of ITS positions only (every rank computes the same
loss from the same gathered tensor, so the slice is the whole of that rank's share). Each rank's parameter
gradients are then a partial sum (its positions, plus what the all-to-alls bring back from the others' attention);
the SUM of the gradients over the SP group is the SP = 1 gradient. A training engine must therefore sum (not
average) gradients within the SP group, and average over data-parallel replicas only: with DeepSpeed, every rank
backpropagates ``loss * world_size`` (normalised by the global token count) and the engine averages over all ranks
(tested under ZeRO-3: docs/distributed.md, "Sequence parallelism (Ulysses)").
"""

from __future__ import annotations

import dataclasses

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint

from reasonrl.algos.entropy import _entropy_rows
from reasonrl.models.batching import PackedBatch, PaddedBatch, scatter_to_padded
from reasonrl.models.logprobs import _logprob_rows
from reasonrl.models.ulysses_attention import ULYSSES_BY_CORE, UlyssesContext

# No mask is built by transformers for an SP forward: the attention builds the whole sequence's (UlyssesContext).
_NO_MASKS = {"full_attention": None, "sliding_attention": None}


@dataclasses.dataclass
class ShardLayout:
    """A micro-batch as N equal slices of positions; every tensor is the whole row, [batch, S], S = N * L."""

    input_ids: torch.Tensor  # [batch, S] long, pad id 0 beyond the micro-batch
    position_ids: torch.Tensor  # [batch, S] long, RoPE positions (restart per packed sequence)
    keep: torch.Tensor  # [batch, S] bool, False = padding
    segment: torch.Tensor  # [batch, S] long, packed-sequence index (0 for a padded row, -1 for the tail)
    scored: torch.Tensor  # [batch, S] bool, True at the positions that predict a response token
    labels: torch.Tensor  # [batch, S] long, the token each position predicts (input_ids shifted by one)
    width: int  # S0: the micro-batch's own width, S0 <= S
    size: int  # N
    rank: int  # this rank's index in the SP group

    @property
    def local_len(self) -> int:
        """L = S / N positions per rank."""
        return self.input_ids.shape[1] // self.size

    def local(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's slice of a whole-row tensor: [batch, S, ...] -> [batch, L, ...]."""
        return x[:, self.rank * self.local_len : (self.rank + 1) * self.local_len]


def _pad_to(x: torch.Tensor, width: int, value) -> torch.Tensor:
    """Right-pad [batch, S0] to [batch, width] with ``value``."""
    return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)


def shard_layout(batch: PaddedBatch | PackedBatch, size: int, rank: int) -> ShardLayout:
    """The whole-row inputs of an SP forward of ``batch`` over ``size`` ranks (module docstring).

    Raises ValueError for a vision-language batch: its image features are merged into the token embeddings and
    its 3-D positions computed by the model from the whole sequence, which a rank holding a slice cannot do."""
    if isinstance(batch, PaddedBatch):
        if batch.vision is not None:
            raise ValueError(
                "sequence_parallel_size > 1 does not serve vision-language models: the vision tower's "
                "features and 3-D positions need the whole sequence on one rank"
            )
        ids, keep = batch.input_ids, batch.attention_mask.bool()  # [batch, S0]
        positions = batch.position_ids if batch.position_ids is not None else (keep.long().cumsum(-1) - 1).clamp(0)
        segment = torch.zeros_like(ids)
        scored = torch.zeros_like(keep)
        start = batch.prompt_width - 1  # column predicting response token 0
        scored[:, start : start + batch.num_actions] = batch.action_mask
    elif isinstance(batch, PackedBatch):
        ids, positions = batch.input_ids, batch.position_ids  # [1, S0]
        keep = torch.ones_like(ids, dtype=torch.bool)
        lens = torch.tensor(batch.seq_lens, device=ids.device)
        segment = torch.repeat_interleave(torch.arange(len(lens), device=ids.device), lens)[None]  # [1, S0]
        scored = torch.zeros_like(keep)
        scored[0, batch.response_positions] = True
    else:
        raise TypeError(f"batch must be a PaddedBatch or PackedBatch, got {type(batch).__name__}")
    width = ids.shape[1]
    full = -(-width // size) * size  # S = N * ceil(S0 / N)
    labels = _pad_to(ids[:, 1:], full, 0)  # position i predicts token i + 1
    return ShardLayout(
        input_ids=_pad_to(ids, full, 0),
        position_ids=_pad_to(positions, full, 0),
        keep=_pad_to(keep, full, False),
        segment=_pad_to(segment, full, -1),
        scored=_pad_to(scored, full, False),
        labels=labels,
        width=width,
        size=size,
        rank=rank,
    )


class _GatherSequence(torch.autograd.Function):
    """all_gather along dim 1; backward: this rank's slice of the gradient (every rank computes the same loss)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.rank, ctx.width = dist.get_rank(group), x.shape[1]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=1)

    @staticmethod
    def backward(ctx, grad):
        return grad.narrow(1, ctx.rank * ctx.width, ctx.width), None


def gather_sequence(x: torch.Tensor, group) -> torch.Tensor:
    """[batch, L, ...] per rank -> [batch, N * L, ...] on every rank, in rank order (module docstring: gradients)."""
    return _GatherSequence.apply(x, group)


def _unwrap(model):
    """The module a DeepSpeed engine wraps (``engine.module``), or ``model`` itself."""
    return getattr(model, "module", model)


def _check_attention(model) -> None:
    impl = _unwrap(model).config._attn_implementation
    if impl not in ULYSSES_BY_CORE.values():
        raise ValueError(
            f"the model runs attention {impl!r}: call reasonrl.models.ulysses_attention.use_ulysses_attention(model) "
            "before a sequence-parallel forward"
        )


def sp_forward(model, layout: ShardLayout, group, **extra):
    """Call ``model`` (the root: a transformers model, a ``CriticModel``, or a DeepSpeed engine wrapping one) on this
    rank's [batch, L] ids and explicit positions, the whole row's mask travelling in the ``ulysses`` context
    (``extra``: more keyword arguments of the forward, e.g. ``use_cache=False`` for a causal LM).

    Through the root, never a submodule: a DeepSpeed engine's ``forward`` does per-micro-batch bookkeeping (ZeRO-3
    counts micro-steps there: without it a second micro-batch's gradients overwrote the first's, measured) and
    hooks its output for the backward prologue, so the loss must depend on the output returned here."""
    _check_attention(model)
    context = UlyssesContext(group=group, keep=layout.keep, segment=layout.segment)
    return model(
        input_ids=layout.local(layout.input_ids),
        position_ids=layout.local(layout.position_ids),
        attention_mask=_NO_MASKS,
        ulysses=context,
        **extra,
    )


def _head_rows(head, hidden, labels, temperature: float, with_entropy: bool):
    """Rows [n, hidden] -> log-probs [n] (and entropies [n]) of ``softmax(head(h) / T)``, float32."""
    z = head(hidden).float()  # [n, vocab]
    if temperature != 1.0:
        z = z / temperature
    logprob = _logprob_rows(z, labels, 1.0)
    return (logprob, _entropy_rows(z)) if with_entropy else (logprob,)


def _aligned_chunks(rows: int, chunk_size: int, device) -> int:
    """LM-head chunks to run: this rank's ceil(rows / chunk_size), raised to the largest over all ranks.

    Under ZeRO-3 every call of the LM head gathers its weight with every rank of the process group, so all ranks
    must call it equally often (in forward and in the checkpoint's recompute): ranks with fewer scored positions
    run empty chunks ([0, hidden] rows)."""
    count = torch.tensor([-(-rows // chunk_size)], dtype=torch.long, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    return int(count.item())


def _to_grid(full: torch.Tensor, batch: PaddedBatch | PackedBatch) -> torch.Tensor:
    """Whole-row per-position [batch, S0] -> response grid [batch, T], zeros where ``action_mask`` is False."""
    rows = batch.response_slice(full)  # padded [batch, T]; packed [N]
    if isinstance(batch, PackedBatch):
        return scatter_to_padded(rows, batch.action_mask)
    return torch.where(batch.action_mask, rows, torch.zeros_like(rows))


def sp_response_logprobs(
    model,
    batch: PaddedBatch | PackedBatch,
    group,
    temperature: float = 1.0,
    with_entropy: bool = False,
    *,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``response_logprobs`` of a causal LM under sequence parallelism over ``group`` (module docstring).

    Args:
        model: a transformers causal LM (``base_model`` + ``get_output_embeddings()``), or a DeepSpeed engine
            wrapping one, switched to Ulysses attention (``use_ulysses_attention``); every rank of ``group``
            passes the same ``batch``.
        temperature, with_entropy: as ``reasonrl.models.logprobs.response_logprobs``.
        chunk_size: LM-head rows per checkpointed chunk (float32 temporaries [chunk_size, vocab]).
    Returns:
        (logprobs [batch, T] float32, entropy [batch, T] float32 or None), the same on every rank of the group.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    layout = shard_layout(batch, dist.get_world_size(group), dist.get_rank(group))
    inner = _unwrap(model)
    captured = []  # the base model's last hidden state, taken inside the root forward
    hook = inner.base_model.register_forward_hook(lambda _m, _args, out: captured.append(out.last_hidden_state))
    try:  # the root's own LM head runs on no position (logits [batch, 0, vocab]): the head runs below, chunked
        out = sp_forward(model, layout, group, use_cache=False, logits_to_keep=torch.zeros(0, dtype=torch.long))
    finally:
        hook.remove()
    hidden = captured[-1]  # [batch, L, hidden]
    anchor = out.logits.float().sum() * 0.0  # ties the result to the root's output (the engine's backward hooks)
    scored = layout.local(layout.scored)  # [batch, L]
    rows, labels = hidden[scored], layout.local(layout.labels)[scored]  # [n, hidden], [n]
    head = inner.get_output_embeddings()
    use_checkpoint = torch.is_grad_enabled() and rows.requires_grad
    outs = []
    for start in range(0, _aligned_chunks(rows.shape[0], chunk_size, rows.device) * chunk_size, chunk_size):
        args = (head, rows[start : start + chunk_size], labels[start : start + chunk_size], temperature, with_entropy)
        outs.append(checkpoint(_head_rows, *args, use_reentrant=False) if use_checkpoint else _head_rows(*args))
    results = []
    for i in range(2 if with_entropy else 1):
        flat = torch.cat([o[i] for o in outs]) if outs else hidden.new_zeros(0, dtype=torch.float32)  # [n]
        local = (hidden.new_zeros(scored.shape, dtype=torch.float32) + anchor).masked_scatter(scored, flat)  # [b, L]
        full = gather_sequence(local, group)[:, : layout.width]  # [batch, S0]
        results.append(_to_grid(full, batch))
    return results[0], (results[1] if with_entropy else None)


def sp_response_values(critic, batch: PaddedBatch | PackedBatch, group) -> torch.Tensor:
    """``response_values`` of a ``CriticModel`` (or an engine wrapping one) under sequence parallelism:
    V(s_t) [batch, T] float32, zeros where masked, the same on every rank of ``group``."""
    layout = shard_layout(batch, dist.get_world_size(group), dist.get_rank(group))
    values = sp_forward(critic, layout, group)  # [batch, L] float32
    full = gather_sequence(values, group)[:, : layout.width]  # [batch, S0]
    return _to_grid(full, batch)

"""Ulysses attention for Hugging Face models: sequence-sharded activations, head-sharded attention.

Each of the N ranks of a sequence-parallel (SP) group holds a contiguous slice of L = S / N positions of every
sequence of the micro-batch. Everything outside attention is position-wise and runs on the slice; attention needs
the whole sequence, so around the core attention two all-to-alls swap which dimension is split::

    q, k, v   [batch, heads, L, head_dim]      (this rank's positions, all heads)
      -- all_to_all: scatter heads, gather positions -->
              [batch, heads / N, S, head_dim]  (all positions, this rank's heads)
    core attention (sdpa or eager) over the whole sequence: causal within each sequence's span (no mask tensor),
    or, only where a sequence's tokens are not contiguous, with the FULL mask [batch, 1, S, S]
      -- all_to_all: scatter positions, gather heads -->
    out       [batch, L, heads, head_dim]

Attention is independent per head, so the result equals the unsplit attention (up to float reduction order).
Both all-to-alls are differentiable: the backward of one is the other (:class:`_AllToAll`).

Why not DeepSpeed's ``UlyssesSPAttentionHF`` (``deepspeed/runtime/sequence_parallel/ulysses_sp.py``, read for this
module): its ``register_with_transformers`` writes ``"ulysses"`` into transformers' process-wide attention table
and replaces the core attention of every model in the process, refuses eager, fixes the micro-batch size at
registration, and drops the attention mask (sdpa then runs ``is_causal``), so left padding and packed sequences
(which need a block-diagonal mask) come out wrong. Here:

* the function is registered under OUR names (:data:`ULYSSES_SDPA`, :data:`ULYSSES_EAGER`: the name carries the
  core backend) with ``AttentionInterface`` and ``AttentionMaskInterface``, overwriting nothing, and selected per
  model by :func:`use_ulysses_attention` (``set_attn_implementation`` on that model only);
* the SP state travels with the forward call as the keyword argument ``ulysses`` (a :class:`UlyssesContext`),
  which transformers hands down to every attention call; a forward without it (SP = 1, generation) runs the core
  backend with transformers' own mask, unchanged;
* the visibility is rebuilt for the whole sequence from the context: key ``k`` is visible to query ``q`` iff
  ``k <= q``, ``keep[k]`` (not padding) and ``segment[q] == segment[k]`` (same packed sequence). Where every
  sequence's kept tokens are one contiguous span (left or right padding, packing: the micro-batches the workers
  build), that is causal attention within each span, and the core runs ``is_causal`` once per span
  (:meth:`UlyssesContext.spans`): no [S, S] tensor at all, and sdpa may take its flash kernel. Otherwise (a hole in
  a sequence's attention mask) a dense mask is built, whose diagonal is always visible so rows of padding never
  softmax over nothing; padding's outputs are junk (0 on the span path), never scored and never attended to;
* any micro-batch shape: the positions per rank are read from the tensors at every call.

Limits: the head counts (query and key/value) must be divisible by N (no key/value replication); sliding-window
layers and attention dropout with SP are refused (the mask and the RNG would differ from SP = 1).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import torch.distributed as dist
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

ULYSSES_SDPA = "reasonrl_ulysses_sdpa"
ULYSSES_EAGER = "reasonrl_ulysses_eager"
ULYSSES_BY_CORE = {"sdpa": ULYSSES_SDPA, "eager": ULYSSES_EAGER}


def _all_to_all(x: torch.Tensor, group, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Chunk ``x`` into N pieces along ``scatter_dim``, send piece j to rank j, and concatenate the pieces received
    (in rank order) along ``gather_dim``: e.g. [b, h, L, d] -> [b, h/N, N*L, d] for scatter 1, gather 2."""
    n = dist.get_world_size(group)
    if n == 1:
        return x
    send = torch.stack([c.contiguous() for c in x.chunk(n, dim=scatter_dim)])  # [N, *piece]
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat(list(recv.unbind(0)), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    """Differentiable :func:`_all_to_all`; its adjoint is the all-to-all with the two dimensions swapped."""

    @staticmethod
    def forward(ctx, x, group, scatter_dim: int, gather_dim: int):
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return _all_to_all(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad, ctx.group, ctx.gather_dim, ctx.scatter_dim), None, None, None


def seq_to_heads(x: torch.Tensor, group) -> torch.Tensor:
    """[batch, heads, L, head_dim] (my positions) -> [batch, heads / N, S, head_dim] (my heads)."""
    return _AllToAll.apply(x, group, 1, 2)


def heads_to_seq(x: torch.Tensor, group) -> torch.Tensor:
    """[batch, heads / N, S, head_dim] (my heads) -> [batch, heads, L, head_dim] (my positions)."""
    return _AllToAll.apply(x, group, 2, 1)


@dataclasses.dataclass
class UlyssesContext:
    """What the attention of one SP forward needs beyond q, k, v: the group and the whole sequence's mask inputs.

    Every rank of the group holds the same (whole, padded to a multiple of N) ``keep`` and ``segment``.
    """

    group: object  # torch.distributed ProcessGroup of the N ranks sharing these sequences
    keep: torch.Tensor  # [batch, S] bool, False = padding (never attended to)
    segment: torch.Tensor  # [batch, S] long, tokens attend only within their segment (packed sequences)
    _masks: dict = dataclasses.field(default_factory=dict, repr=False)

    def causal_only(self) -> bool:
        """True when plain causal attention is this mask on every position that is scored: each row's tokens are a
        prefix (no left padding; the pad to a multiple of N is on the right, where causal queries never look) of
        one segment. Then the core runs ``is_causal`` without a mask: no [S, S] tensor, and sdpa may take its
        flash kernel (on CPU too), which keeps no [heads, S, S] scores for backward. Long sequences, one per
        micro-batch, are exactly this case."""
        if "causal_only" not in self._masks:
            keep = self.keep.bool()
            lengths = keep.sum(1)  # [batch]
            pos = torch.arange(keep.shape[1], device=keep.device)
            prefix = bool((keep == (pos[None, :] < lengths[:, None])).all())
            first = self.segment[:, :1]
            one_segment = bool(((self.segment == first) | ~keep).all())
            self._masks["causal_only"] = prefix and one_segment
        return self._masks["causal_only"]

    def spans(self) -> list[list[tuple[int, int]]] | None:
        """Per row, the ``(start, end)`` span of each sequence's kept tokens, in order; None when some sequence's kept
        tokens are not contiguous (then only the dense :meth:`mask` is exact).

        Within a span [s, e), query q sees keys [s, q]: exactly the visibility of :meth:`mask` for a kept query.
        """
        if "spans" not in self._masks:
            keep = self.keep.bool()  # [batch, S]
            joined = keep[:, 1:] & keep[:, :-1] & (self.segment[:, 1:] == self.segment[:, :-1])  # [batch, S - 1]
            no = torch.zeros_like(keep[:, :1])
            starts = keep & ~torch.cat([no, joined], 1)  # a kept token not continuing its left neighbour's span
            ends = keep & ~torch.cat([joined, no], 1)  # a kept token not continued by its right neighbour
            rows, first = starts.nonzero(as_tuple=True)
            last = ends.nonzero(as_tuple=True)[1]  # row-major like ``first``: the i-th end closes the i-th start
            segments = self.segment[rows, first]
            per_row: list[list[tuple[int, int]]] = [[] for _ in range(keep.shape[0])]
            seen = set()
            for row, start, end, seg in zip(
                rows.tolist(), first.tolist(), last.tolist(), segments.tolist(), strict=True
            ):
                seen.add((row, seg))
                per_row[row].append((start, end + 1))
            contiguous = len(seen) == len(segments)  # no sequence has two spans
            self._masks["spans"] = per_row if contiguous else None
        return self._masks["spans"]

    def mask(self, core: str, dtype: torch.dtype) -> torch.Tensor:
        """The whole sequence's mask, built once per forward (and reused by the recompute of checkpointing).

        ``visible[b, q, k] = (k <= q) & keep[b, k] & (segment[b, q] == segment[b, k]) | (q == k)``; returned as
        bool ``[batch, 1, S, S]`` for sdpa, additive float (0 / finfo.min) for eager.
        """
        key = (core, dtype)
        if key not in self._masks:
            s = self.keep.shape[1]
            pos = torch.arange(s, device=self.keep.device)
            causal = pos[None, :] <= pos[:, None]  # [S, S]
            same = self.segment[:, :, None] == self.segment[:, None, :]  # [batch, S, S]
            visible = (causal[None] & same & self.keep[:, None, :].bool()) | torch.eye(
                s, dtype=torch.bool, device=self.keep.device
            )
            visible = visible[:, None]  # [batch, 1, S, S]
            if core == "eager":
                zero = torch.zeros((), dtype=dtype, device=visible.device)
                visible = torch.where(visible, zero, torch.finfo(dtype).min)
            self._masks[key] = visible
        return self._masks[key]


def eager_core(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None):
    """softmax(q k^T * scaling + mask) v, the softmax in float32, as transformers' eager attention.

    q [batch, h, Sq, d], k/v [batch, h_kv, Sk, d]; mask bool (True = visible), additive float, or None (causal).
    Returns ([batch, Sq, h, d], weights [batch, h, Sq, Sk])."""
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # [batch, h, Sq, Sk]
    if attention_mask is None:
        sq, sk = scores.shape[-2:]
        attention_mask = torch.ones(sq, sk, dtype=torch.bool, device=scores.device).tril(sk - sq)
    if attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    else:
        scores = scores + attention_mask[..., : scores.shape[-1]]
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def _core(core: str, module, query, key, value, mask, dropout, scaling, **kwargs):
    if core == "sdpa":
        return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling, **kwargs)
    return eager_core(module, query, key, value, mask, dropout=dropout, scaling=scaling)


def attend_spans(core: str, module, query, key, value, scaling, spans: list[list[tuple[int, int]]]) -> torch.Tensor:
    """Causal attention within each span, one core call per span (no mask tensor); positions outside every span
    (padding) get 0.

    q [batch, h, S, d], k/v [batch, h_kv, S, d]; ``spans[b]`` the (start, end) spans of row b, in order.
    Returns [batch, S, h, d]."""
    batch, heads, s, dim = query.shape
    rows = []
    for b in range(batch):
        pieces, at = [], 0
        for start, end in spans[b]:
            if start > at:
                pieces.append(query.new_zeros(1, start - at, heads, dim))
            one = slice(b, b + 1), slice(None), slice(start, end)
            out, _ = _core(core, module, query[one], key[one], value[one], None, 0.0, scaling)  # [1, e - s, h, d]
            pieces.append(out)
            at = end
        if at < s:
            pieces.append(query.new_zeros(1, s - at, heads, dim))
        rows.append(torch.cat(pieces, 1))
    return torch.cat(rows, 0)


def ulysses_attention(
    module,
    query: torch.Tensor,  # [batch, heads, L, head_dim]
    key: torch.Tensor,  # [batch, kv_heads, L, head_dim]
    value: torch.Tensor,  # [batch, kv_heads, L, head_dim]
    attention_mask,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    core: str,
    ulysses: UlyssesContext | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; returns ([batch, L, heads, head_dim], None).

    Without ``ulysses`` (no SP forward): the core backend with transformers' mask, as the plain model."""
    if ulysses is None:
        return _core(core, module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if dropout:
        raise ValueError("sequence parallelism with attention dropout is not supported (set attention_dropout=0)")
    if kwargs.get("sliding_window"):
        raise ValueError("sequence parallelism does not support sliding-window attention layers")
    group = ulysses.group
    q, k, v = (seq_to_heads(t, group) for t in (query, key, value))  # [batch, h / N, S, head_dim]
    if ulysses.causal_only():  # one call, causal, no [S, S] mask
        out, _ = _core(core, module, q, k, v, None, 0.0, scaling)  # [batch, S, h / N, d]
    elif (spans := ulysses.spans()) is not None:  # causal within each sequence's span, no [S, S] mask
        out = attend_spans(core, module, q, k, v, scaling, spans)
    else:  # a sequence with a hole in its attention mask: the dense whole-row mask
        out, _ = _core(core, module, q, k, v, ulysses.mask(core, q.dtype), 0.0, scaling)
    out = heads_to_seq(out.transpose(1, 2), group)  # [batch, heads, L, head_dim]
    return out.transpose(1, 2).contiguous(), None


@functools.cache
def register_ulysses_attention() -> None:
    """Register :data:`ULYSSES_SDPA` / :data:`ULYSSES_EAGER` with transformers (new names only; idempotent).

    Their mask functions are transformers' sdpa / eager ones, used by forwards without SP."""
    for name, core, mask_fn in ((ULYSSES_SDPA, "sdpa", sdpa_mask), (ULYSSES_EAGER, "eager", eager_mask)):
        AttentionInterface.register(name, functools.partial(ulysses_attention, core=core))
        AttentionMaskInterface.register(name, mask_fn)


def check_heads(config, size: int, field: str = "sequence_parallel_size") -> None:
    """Raise ValueError naming ``field`` unless ``size`` divides the query and the key/value head counts, and the
    model has no sliding-window layers and no attention dropout (text config of ``config``)."""
    text = config.get_text_config()
    heads, kv_heads = text.num_attention_heads, getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    for name, count in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if count % size:
            raise ValueError(f"{field}={size} must divide the model's {name}={count} (Ulysses splits heads)")
    if size > 1 and "sliding_attention" in (getattr(text, "layer_types", None) or []):
        raise ValueError(f"{field}={size}: the model has sliding-window attention layers, not supported with SP")
    if size > 1 and getattr(text, "attention_dropout", 0.0):
        raise ValueError(f"{field}={size}: attention_dropout={text.attention_dropout} is not supported with SP")


def use_ulysses_attention(model, core: str = "sdpa") -> str:
    """Switch ``model`` (only it) to Ulysses attention around ``core`` (``sdpa`` or ``eager``); returns the
    implementation it had. Forwards without a :class:`UlyssesContext` keep computing exactly as before."""
    if core not in ULYSSES_BY_CORE:
        raise ValueError(f"Ulysses attention wraps sdpa or eager, got core={core!r}")
    register_ulysses_attention()
    before = model.config._attn_implementation
    model.set_attn_implementation(ULYSSES_BY_CORE[core])
    return before

"""Turning (prompt_token_ids, response_token_ids) pairs into model inputs: padded or packed, and micro-batches.

Two layouts, both with the response tokens mapped back to a ``[batch, T]`` grid (``T`` = longest response) and an
``action_mask`` ``[batch, T]`` (True = real response token), the convention of ``reasonrl.algos``.

Padded (``pad_batch`` -> ``PaddedBatch``): prompts are LEFT-padded to the longest prompt ``P`` and responses
RIGHT-padded to ``T`` (OpenRLHF/ORZ style), so every response starts at column ``P``::

    row i:  [pad .. pad  prompt_i | response_i  pad .. pad]      width S = P + T
    column: 0 ........... P-1       P ............. P+T-1

Response token ``t`` sits at column ``P + t`` and is predicted by the logits at column ``P - 1 + t``, so the
response slice of any per-position output (logits, hidden states, values) is ``out[:, P-1 : P-1+T]``.
``position_ids = clip(cumsum(attention_mask) - 1, 0)``: real tokens get 0, 1, 2, ... as in the unpadded sequence.

Packed (``pack_batch`` -> ``PackedBatch``): padding-free; the sequences ``prompt_i + response_i`` are concatenated
into one row ``[1, total]`` and ``position_ids`` restart at 0 for every sequence. There is no attention mask: the
model must keep attention inside each sequence using the position-id resets (see ``supports_packing``).
``response_positions`` [N] holds, for every response token (sample-major, N = sum of response lengths), the
column of the packed row that predicts it, so ``out[0, response_positions]`` are the response entries in the order
of ``action_mask.nonzero()``; ``scatter_to_padded`` puts them on the ``[batch, T]`` grid.

Micro-batches: ``split_by_token_budget`` (bounded tokens per micro-batch) and ``split_fixed`` (fixed count).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

Sample = tuple[Sequence[int], Sequence[int]]  # (prompt_token_ids, response_token_ids)


@dataclasses.dataclass
class PaddedBatch:
    """Left-padded prompts, right-padded responses; responses start at column ``prompt_width``."""

    input_ids: torch.Tensor  # [batch, P + T] long
    attention_mask: torch.Tensor  # [batch, P + T] long, 1 = real token
    position_ids: torch.Tensor | None  # [batch, P + T] long, clip(cumsum(attention_mask) - 1, 0); None: the model's
    action_mask: torch.Tensor  # [batch, T] bool, True = real response token
    prompt_lens: list[int]  # [batch] real prompt lengths
    response_lens: list[int]  # [batch] real response lengths
    # vision-language models: the images' pixel inputs (``reasonrl.models.vision.VisionInputs``), passed to the
    # forward as they are; ``position_ids`` is then None for a model that computes its own (3-D) positions
    vision: dict[str, torch.Tensor] | None = None

    @property
    def num_actions(self) -> int:
        """T: width of the response grid (longest response)."""
        return self.action_mask.shape[1]

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        """The forward's inputs: token ids, attention mask, positions, and the pixel inputs of a VLM batch."""
        return dict(
            input_ids=self.input_ids,
            attention_mask=self.attention_mask,
            position_ids=self.position_ids,
            **(self.vision or {}),
        )

    @property
    def prompt_width(self) -> int:
        """P: width of the left-padded prompt block; response token t is at column P + t."""
        return self.input_ids.shape[1] - self.num_actions

    def response_slice(self, per_position: torch.Tensor) -> torch.Tensor:
        """Entries of a per-position output ``[batch, P+T, ...]`` at the columns that PREDICT the response tokens:
        columns P-1 .. P+T-2 -> ``[batch, T, ...]`` (a view). Masked entries are not zeroed here."""
        start = self.prompt_width - 1
        return per_position[:, start : start + self.num_actions]

    def response_ids(self) -> torch.Tensor:
        """The response token ids on the grid, ``[batch, T]`` (pad id at masked positions)."""
        return self.input_ids[:, self.prompt_width :]

    def to(self, device: torch.device | str) -> PaddedBatch:
        tensors = {
            f: getattr(self, f).to(device)
            for f in ("input_ids", "attention_mask", "position_ids", "action_mask")
            if getattr(self, f) is not None
        }
        vision = None if self.vision is None else {k: v.to(device) for k, v in self.vision.items()}
        return dataclasses.replace(self, **tensors, vision=vision)


@dataclasses.dataclass
class PackedBatch:
    """Sequences ``prompt_i + response_i`` concatenated into one row, no padding, no attention mask."""

    input_ids: torch.Tensor  # [1, total] long
    position_ids: torch.Tensor  # [1, total] long, 0 .. len_i - 1 for each sequence
    cu_seqlens: torch.Tensor  # [batch + 1] int32, sequence i is columns cu_seqlens[i] : cu_seqlens[i+1]
    response_positions: torch.Tensor  # [N] long, column predicting each response token (sample-major)
    action_mask: torch.Tensor  # [batch, T] bool, True = real response token
    prompt_lens: list[int]  # [batch]
    response_lens: list[int]  # [batch]
    # pass cu_seqlens to the forward (flash-attention backends only: see ``forward_kwargs``)
    flash_varlen: bool = False

    attention_mask = None  # always None: an explicit mask would disable the packed-sequence detection

    @property
    def num_actions(self) -> int:
        """T: width of the response grid (longest response)."""
        return self.action_mask.shape[1]

    @property
    def seq_lens(self) -> list[int]:
        return [p + r for p, r in zip(self.prompt_lens, self.response_lens, strict=True)]

    def varlen_kwargs(self) -> dict[str, torch.Tensor | int]:
        """transformers' ``FlashAttentionKwargs`` of this row: ``cu_seq_lens_q/k`` (``cu_seqlens``, int32, on the
        batch's device) and ``max_length_q/k`` (the longest sequence, a Python int from the lengths on the host).

        Given to the forward, every flash-attention layer calls the varlen kernel with them directly
        (``_flash_attention_forward``: ``is_fa_with_varlen_kwargs``) instead of detecting the packing and rebuilding
        them from ``position_ids`` (``_is_packed_sequence``, ``prepare_fa_kwargs_from_position_ids``: a nonzero and
        device-to-host syncs in every layer). The same values: tested against that helper."""
        longest = max(self.seq_lens)
        return {
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": longest,
            "max_length_k": longest,
        }

    def forward_kwargs(self) -> dict[str, torch.Tensor | int]:
        """Extra keyword arguments of the model forward: :meth:`varlen_kwargs` when ``flash_varlen``, else none
        (sdpa/eager keep detecting the packing from ``position_ids`` in the mask, once per forward)."""
        return self.varlen_kwargs() if self.flash_varlen else {}

    def response_slice(self, per_position: torch.Tensor) -> torch.Tensor:
        """Entries of a per-position output ``[1, total, ...]`` at the columns predicting response tokens ->
        ``[N, ...]`` (sample-major; use ``scatter_to_padded`` to get ``[batch, T, ...]``)."""
        return per_position[0].index_select(0, self.response_positions)

    def response_ids(self) -> torch.Tensor:
        """The response token ids flattened sample-major, ``[N]``."""
        return self.input_ids[0].index_select(0, self.response_positions + 1)

    def to(self, device: torch.device | str) -> PackedBatch:
        fields = ("input_ids", "position_ids", "cu_seqlens", "response_positions", "action_mask")
        return dataclasses.replace(self, **{f: getattr(self, f).to(device) for f in fields})


def _check_samples(samples: Sequence[Sample]) -> tuple[list[list[int]], list[list[int]]]:
    if len(samples) == 0:
        raise ValueError("need at least one (prompt_token_ids, response_token_ids) sample")
    prompts, responses = [], []
    for i, (prompt, response) in enumerate(samples):
        if len(prompt) == 0:
            raise ValueError(f"sample {i} has an empty prompt: its first response token would have no predictor")
        prompts.append([int(t) for t in prompt])
        responses.append([int(t) for t in response])
    return prompts, responses


def action_mask_from_lens(response_lens: Sequence[int], width: int | None = None) -> torch.Tensor:
    """[batch, T] bool with the first ``response_lens[i]`` entries of row i True (T = max length by default)."""
    lens = torch.tensor(list(response_lens), dtype=torch.long)  # [batch]
    width = max(response_lens, default=0) if width is None else width
    return torch.arange(width)[None, :] < lens[:, None]


def pad_batch(samples: Sequence[Sample], pad_token_id: int) -> PaddedBatch:
    """Padded layout (module docstring): left-pad prompts to P, right-pad responses to T.

    Args:
        samples: ``batch`` pairs (prompt_token_ids, response_token_ids); prompts must be non-empty, responses
            may be empty (their action_mask row is all False).
        pad_token_id: id written at padded positions (never attended to, never scored).
    """
    prompts, responses = _check_samples(samples)
    batch = len(prompts)
    width_p = max(len(p) for p in prompts)  # P
    width_t = max(len(r) for r in responses)  # T
    input_ids = torch.full((batch, width_p + width_t), pad_token_id, dtype=torch.long)  # [batch, P+T]
    attention_mask = torch.zeros(batch, width_p + width_t, dtype=torch.long)  # [batch, P+T]
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        start, end = width_p - len(prompt), width_p + len(response)
        input_ids[i, start:end] = torch.tensor(prompt + response, dtype=torch.long)
        attention_mask[i, start:end] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # [batch, P+T]
    return PaddedBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        action_mask=action_mask_from_lens([len(r) for r in responses], width_t),  # [batch, T]
        prompt_lens=[len(p) for p in prompts],
        response_lens=[len(r) for r in responses],
    )


def pack_batch(samples: Sequence[Sample], *, flash_varlen: bool = False) -> PackedBatch:
    """Packed layout (module docstring): one row ``[1, total]``, positions restarting at 0 per sequence.
    ``flash_varlen``: the model runs flash-attention, give it ``cu_seqlens`` (:meth:`PackedBatch.forward_kwargs`)."""
    prompts, responses = _check_samples(samples)
    ids, positions, response_positions, offsets = [], [], [], [0]
    for prompt, response in zip(prompts, responses, strict=True):
        seq = prompt + response
        start = offsets[-1]
        ids.extend(seq)
        positions.extend(range(len(seq)))
        # response token t is at column start + len(prompt) + t, predicted by the column before it
        response_positions.extend(range(start + len(prompt) - 1, start + len(seq) - 1))
        offsets.append(start + len(seq))
    return PackedBatch(
        input_ids=torch.tensor([ids], dtype=torch.long),  # [1, total]
        position_ids=torch.tensor([positions], dtype=torch.long),  # [1, total]
        cu_seqlens=torch.tensor(offsets, dtype=torch.int32),  # [batch + 1]
        response_positions=torch.tensor(response_positions, dtype=torch.long),  # [N]
        action_mask=action_mask_from_lens([len(r) for r in responses]),  # [batch, T]
        prompt_lens=[len(p) for p in prompts],
        response_lens=[len(r) for r in responses],
        flash_varlen=flash_varlen,
    )


def scatter_to_padded(flat: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """Put sample-major response entries ``[N, ...]`` on the grid ``[batch, T, ...]``; zeros where masked.

    Inverse of ``grid[action_mask]``. Differentiable with respect to ``flat``.
    """
    mask = action_mask.bool()
    if flat.shape[0] != int(mask.sum()):
        raise ValueError(f"{flat.shape[0]} entries for {int(mask.sum())} response tokens in action_mask")
    out = flat.new_zeros(*mask.shape, *flat.shape[1:])
    out[mask] = flat
    return out


def packing_pays(attn_implementation: str | None) -> bool:
    """Whether the packed layout costs less than the padded one on this backend: only flash-attention's varlen
    kernels (no padding computed, no mask). On ``sdpa``/``eager`` packing is exact (:func:`supports_packing`) but
    builds a dense ``[total, total]`` block mask and saves no attention FLOPs: measured on CPU (26 M-parameter Qwen2,
    32 samples of ~96 tokens, sdpa) the GRPO update took 11.7 s packed vs 7.2 s padded."""
    return "flash" in (attn_implementation or "").lower()


def supports_packing(attn_implementation: str | None) -> bool:
    """Whether the packed layout keeps attention inside each sequence for this attention backend.

    The packed forward passes ``attention_mask=None`` and ``use_cache=False`` with the resetting position_ids:

    * ``flash_attention_2`` / ``flash_attention_3`` (and hub kernels named ``*flash*``): the varlen kernel with
      ``cu_seqlens``, given by the batch (:meth:`PackedBatch.forward_kwargs`), else derived by transformers from the
      position-id resets in every layer: exact and efficient. Always True.
    * ``sdpa``, ``eager``, ``flex_attention``: only models whose mask comes from ``transformers.masking_utils``
      (all in-library decoder models in recent transformers, e.g. Qwen2/Llama) turn the resets into a
      block-diagonal causal mask (``find_packed_sequence_indices``). That costs a dense [total, total] mask and
      no saving in attention FLOPs, but is exact; True when the installed transformers has that detection.
      Older transformers (or remote-code models with their own masking) attend ACROSS sequence boundaries:
      silently wrong log-probs. The detection is also skipped when an attention mask or a KV cache is passed,
      which is why the helpers here always pass ``attention_mask=None, use_cache=False``.
    * anything else (``paged_attention``, unknown): False.
    """
    name = (attn_implementation or "").lower()
    if "flash" in name:
        return True
    if name in ("sdpa", "eager", "flex_attention"):
        try:
            from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
        except ImportError:
            return False
        return True
    return False


PACKING_MODES = ("off", "auto", "on")


def decide_packing(mode: str, attn_implementation: str | None) -> bool:
    """Whether a model with the RESOLVED ``attn_implementation`` runs packed micro-batches, decided where it runs.

    ``mode``: ``off`` never; ``auto`` where packing pays (:func:`packing_pays`: flash-attention's varlen kernels;
    the experiment config's ``packing_samples=true``); ``on`` wherever the backend keeps sequences apart
    (:func:`supports_packing`: exact on sdpa/eager too, but slower; SFT's ``packing=true``, tests of the layout).
    """
    if mode not in PACKING_MODES:
        raise ValueError(f"packing={mode!r}: expected one of {', '.join(PACKING_MODES)}")
    if mode == "off":
        return False
    return packing_pays(attn_implementation) if mode == "auto" else supports_packing(attn_implementation)


def padded_grid_tokens(samples: Sequence[Sample]) -> int:
    """Cells of the ``[count, P+T]`` grid :func:`pad_batch` builds for ``samples`` (the padded layout's cost)."""
    if not samples:
        return 0
    return len(samples) * (max(len(p) for p, _ in samples) + max(len(r) for _, r in samples))


def split_by_token_budget(
    lengths: Sequence[int],
    max_tokens_per_micro_batch: int,
    *,
    padded: bool = False,
    prompt_lengths: Sequence[int] | None = None,
) -> list[list[int]]:
    """Greedy, order-preserving split of samples into micro-batches of at most ``max_tokens_per_micro_batch``.

    Args:
        lengths: tokens per sample (prompt + response).
        max_tokens_per_micro_batch: the budget, in tokens of the layout that will run:
            packed (``padded=False``): ``sum(lengths)``;
            padded: the grid :func:`pad_batch` builds, ``count * (max P + max T)`` with ``P`` the prompt and
            ``T`` the response lengths (``prompt_lengths`` given), or ``count * max(lengths)`` without them.
        prompt_lengths: tokens of each sample's prompt (padded layout only).
    Returns:
        Lists of sample indices; concatenated they are ``0 .. len(lengths)-1`` in order. A sample is appended to
        the current micro-batch while the cost stays within budget, else it starts a new one. A single sample
        longer than the budget gets a micro-batch of its own (never dropped, never truncated).
    """
    if max_tokens_per_micro_batch <= 0:
        raise ValueError(f"max_tokens_per_micro_batch must be > 0, got {max_tokens_per_micro_batch}")
    if prompt_lengths is not None and len(prompt_lengths) != len(lengths):
        raise ValueError(f"prompt_lengths has {len(prompt_lengths)} entries for {len(lengths)} samples")
    batches: list[list[int]] = []
    current: list[int] = []
    total = width_p = width_t = 0
    for i, n in enumerate(lengths):
        n = int(n)
        p = int(prompt_lengths[i]) if prompt_lengths is not None else 0
        if n < 0 or not 0 <= p <= n:
            raise ValueError(f"lengths[{i}] = {n}, prompt length {p}: need 0 <= prompt <= length")
        wp, wt = max(width_p, p), max(width_t, n - p)
        cost = (len(current) + 1) * (wp + wt) if padded else total + n
        if current and cost > max_tokens_per_micro_batch:
            batches.append(current)
            current, total, wp, wt = [], 0, p, n - p
        current.append(i)
        total, width_p, width_t = total + n, wp, wt
    if current:
        batches.append(current)
    return batches


def plan_micro_batches(
    lengths: Sequence[int],
    max_tokens_per_micro_batch: int,
    *,
    padded: bool = False,
    prompt_lengths: Sequence[int] | None = None,
) -> list[list[int]]:
    """The micro-batches a worker runs on its samples: lists of sample indices, each index once.

    Packed (``padded=False``): :func:`split_by_token_budget` in batch order (a packed row has no padding, so the
    order costs nothing). Padded: the samples grouped by length: taken in order of ``length`` (stable), cut
    greedily by the padded grid's cost (:func:`split_by_token_budget` on that order), shortest group first, each
    group's indices ascending. A short sample then shares its grid with samples of about its length instead of
    being padded to the longest one that happened to be next in the batch: with long-tailed response lengths (RL's
    usual case) that is far fewer cells, and fewer micro-batches. The grid's cost is ``count * (longest prompt +
    longest response)``, so with prompt lengths that vary against the responses the grouping can need more
    micro-batches than batch order; then (or with as many micro-batches and more cells) batch order is kept. A
    batch that fits one micro-batch gives ``[[0, 1, ..., n - 1]]`` either way.
    """
    in_order = split_by_token_budget(
        lengths, max_tokens_per_micro_batch, padded=padded, prompt_lengths=prompt_lengths if padded else None
    )
    if not padded or len(in_order) <= 1:
        return in_order
    order = sorted(range(len(lengths)), key=lambda i: int(lengths[i]))
    prompts = None if prompt_lengths is None else [prompt_lengths[i] for i in order]
    groups = split_by_token_budget(
        [lengths[i] for i in order], max_tokens_per_micro_batch, padded=True, prompt_lengths=prompts
    )
    grouped = [sorted(order[k] for k in group) for group in groups]

    def cells(batches: list[list[int]]) -> int:
        return sum(padded_grid_cells(mb, lengths, prompt_lengths) for mb in batches)

    if (len(grouped), cells(grouped)) <= (len(in_order), cells(in_order)):
        return grouped
    return in_order


def padded_grid_cells(indices: Sequence[int], lengths: Sequence[int], prompt_lengths: Sequence[int] | None) -> int:
    """Cells of the padded grid of the samples ``indices``, as :func:`split_by_token_budget` counts them:
    ``count * (longest prompt + longest response)``, or ``count * longest length`` without ``prompt_lengths``."""
    if prompt_lengths is None:
        return len(indices) * max(lengths[i] for i in indices)
    longest_prompt = max(prompt_lengths[i] for i in indices)
    return len(indices) * (longest_prompt + max(lengths[i] - prompt_lengths[i] for i in indices))


def split_fixed(num_samples: int, micro_batch_size: int) -> list[list[int]]:
    """Consecutive micro-batches of ``micro_batch_size`` sample indices (the last one may be smaller)."""
    if micro_batch_size <= 0:
        raise ValueError(f"micro_batch_size must be > 0, got {micro_batch_size}")
    return [list(range(s, min(s + micro_batch_size, num_samples))) for s in range(0, num_samples, micro_batch_size)]

"""Loss aggregation: how a per-token loss matrix [batch, seq] becomes one scalar.

Modes (``AGG_MODES``), with m the action mask, L the per-token loss, N_tok the number of valid tokens, N_seq the
number of sequences with at least one valid token, C a constant (e.g. the max response length)::

    token-mean               sum_{i,t} L m / N_tok                                   (DAPO, verl's default)
    seq-mean-token-sum       sum_i (sum_t L m) / N_seq
    seq-mean-token-mean      sum_i (sum_t L m / sum_t m) / N_seq                      (GRPO paper, ORZ)
    seq-mean-token-sum-norm  sum_{i,t} L m / (N_seq * C)                              (Dr.GRPO)

Micro-batch / data-parallel invariance: pass the counts of the FULL mini-batch (over every micro-batch and every
data-parallel rank), as computed by ``count_tokens_and_seqs`` on the full mini-batch, via ``global_num_tokens``
and ``global_num_seqs``. Then each call returns that micro-batch's share of the full-batch loss, and the sum of
the shares (and of their gradients) over all micro-batches and ranks equals the loss of the full batch.
Without the global counts the local counts are used (correct only for a single micro-batch on one rank).

Data-parallel note: DDP / FSDP / DeepSpeed AVERAGE gradients over ranks. To get the SUM of the shares the
trainer must multiply each rank's loss by the world size before ``backward`` (verl's ``dp_size`` factor).
"""

from __future__ import annotations

import torch

from reasonrl.algos.utils import masked_sum

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def check_agg_mode(mode: str) -> str:
    """Return ``mode`` if it is one of ``AGG_MODES``; ``ValueError`` listing the valid modes otherwise
    (use it to validate a config at start-up)."""
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid modes: {list(AGG_MODES)}")
    return mode


def count_tokens_and_seqs(action_mask: torch.Tensor) -> tuple[int, int]:
    """(number of valid tokens, number of sequences with at least one valid token) of ``action_mask``
    [batch, seq]. Call it on the full mini-batch (sum it over data-parallel ranks with an all-reduce) to get
    ``global_num_tokens`` / ``global_num_seqs`` for ``aggregate_loss``."""
    mask = action_mask.bool()
    return int(mask.sum().item()), int(mask.any(dim=-1).sum().item())


def aggregate_loss(
    loss_mat: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
) -> torch.Tensor:
    """Aggregate ``loss_mat`` [batch, seq] over valid positions of ``mask`` [batch, seq] into a scalar.

    Args:
        loss_mat: per-token loss [batch, seq]; values at masked positions are ignored (even NaN/inf).
        mask: [batch, seq] action mask.
        mode: one of ``AGG_MODES`` (see the module docstring for the formulas).
        global_num_tokens: valid tokens of the full mini-batch (token-mean). Default: local count.
        global_num_seqs: non-empty sequences of the full mini-batch (seq-mean-*). Default: local count.
        norm_constant: C of seq-mean-token-sum-norm. Required for that mode: it must be a constant of the run
            (e.g. max_response_length) so the loss does not depend on how the batch was padded or split.
    Returns:
        scalar tensor; 0 (with a gradient path) when there is no valid token.
    """
    check_agg_mode(mode)
    m = mask.bool()
    if mode == "token-mean":
        denom = m.sum() if global_num_tokens is None else global_num_tokens
        return masked_sum(loss_mat, m) / _clamp_count(denom, loss_mat)
    seq_denom = m.any(dim=-1).sum() if global_num_seqs is None else global_num_seqs
    if mode == "seq-mean-token-sum":
        return masked_sum(loss_mat, m) / _clamp_count(seq_denom, loss_mat)
    if mode == "seq-mean-token-mean":
        per_seq = masked_sum(loss_mat, m, dim=-1) / m.sum(dim=-1).clamp(min=1).to(loss_mat.dtype)  # [batch]
        return per_seq.sum() / _clamp_count(seq_denom, loss_mat)
    # seq-mean-token-sum-norm
    if norm_constant is None or norm_constant <= 0:
        raise ValueError("agg mode 'seq-mean-token-sum-norm' needs a positive norm_constant (e.g. max_response_length)")
    return masked_sum(loss_mat, m) / (_clamp_count(seq_denom, loss_mat) * norm_constant)


def _clamp_count(count: int | float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A count as a tensor of ``like``'s dtype, at least 1 (so an empty batch gives 0, not NaN)."""
    return torch.as_tensor(count, dtype=like.dtype, device=like.device).clamp(min=1)

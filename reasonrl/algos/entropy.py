"""Token entropy from logits (memory-bounded), the entropy bonus, and Skywork-OR1's adaptive entropy control."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from reasonrl.algos.aggregation import aggregate_loss
from reasonrl.algos.utils import masked_mean


def _entropy_rows(logits: torch.Tensor) -> torch.Tensor:
    """H = logsumexp(z) - sum softmax(z) * z for rows [n, vocab] -> [n] float32."""
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor, chunk_size: int = 1024) -> torch.Tensor:
    """Entropy of the categorical distribution at every position: H = logsumexp(z) - sum_v softmax(z)_v z_v.

    Args:
        logits: [batch, seq, vocab] (any float dtype; computed in float32).
        chunk_size: rows (batch * seq positions) processed at once.
    Returns:
        [batch, seq] float32 entropies.

    The batch*seq rows are processed ``chunk_size`` at a time, so the float32 temporaries (softmax, upcast) are
    at most [chunk_size, vocab] instead of [batch * seq, vocab] (a 150k vocabulary times 16k tokens would need
    ~10 GB per temporary). With autograd each chunk is wrapped in activation checkpointing, so backward keeps
    only the input logits and recomputes the chunk's softmax: the extra peak memory stays O(chunk_size * vocab)
    there too. Gradients are exact.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [batch, seq, vocab], got shape {tuple(logits.shape)}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    batch, seq, vocab = logits.shape
    rows = logits.reshape(batch * seq, vocab)
    use_checkpoint = torch.is_grad_enabled() and logits.requires_grad
    chunks = []
    for start in range(0, rows.shape[0], chunk_size):
        chunk = rows[start : start + chunk_size]  # [chunk, vocab] (a view, no copy)
        if use_checkpoint:
            chunks.append(checkpoint(_entropy_rows, chunk, use_reentrant=False))
        else:
            chunks.append(_entropy_rows(chunk))
    if not chunks:
        return torch.zeros(batch, seq, dtype=torch.float32, device=logits.device)
    return torch.cat(chunks).reshape(batch, seq)


def entropy_bonus(
    entropy: torch.Tensor,
    action_mask: torch.Tensor,
    coef: float,
    *,
    agg_mode: str = "token-mean",
    global_num_tokens: int | float | torch.Tensor | None = None,
    global_num_seqs: int | float | torch.Tensor | None = None,
    norm_constant: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Entropy bonus as a loss term to ADD to the policy loss:  loss = -coef * agg(H).

    Args:
        entropy: [batch, seq] from ``entropy_from_logits`` (with grad to get a gradient).
        action_mask: [batch, seq].
        coef: bonus weight (0 disables; ``AdaptiveEntropyController.effective_coef`` for Skywork-OR1).
    Returns: (scalar loss term, {"entropy": local masked mean of H}).
    """
    mask = action_mask.bool()
    agg = aggregate_loss(entropy, mask, agg_mode, global_num_tokens, global_num_seqs, norm_constant)
    return -coef * agg, {"entropy": masked_mean(entropy.detach().float(), mask)}


class AdaptiveEntropyController:
    """Adaptive entropy control of Skywork-OR1 (He et al. 2025, "Skywork Open Reasoner 1 Technical Report",
    arXiv:2505.22312; ``EntController`` in its code).

    Keeps a coefficient ``coef`` in [min_coef, max_coef]. After each step, with the measured entropy H of the
    current policy on its rollouts::

        coef    = clip(coef + delta, min_coef, max_coef)   if H < target_entropy
        coef    = clip(coef - delta, min_coef, max_coef)   otherwise
        enabled = H < target_entropy

    The bonus is applied only while the entropy is below target: ``effective_coef = coef if enabled else 0``;
    the policy loss becomes ``pg_loss - effective_coef * H``. Before the first update ``enabled`` is False.
    Skywork-OR1's released scripts use target 0.2, init 0.0, delta 1e-4, bounds [0, 5e-3].
    """

    def __init__(
        self,
        target_entropy: float = 0.2,
        init_coef: float = 0.0,
        delta: float = 1e-4,
        min_coef: float = 0.0,
        max_coef: float = 5e-3,
    ):
        if not min_coef <= max_coef:
            raise ValueError(f"min_coef must be <= max_coef, got {min_coef} > {max_coef}")
        if delta < 0:
            raise ValueError(f"delta must be >= 0, got {delta}")
        self.target_entropy = float(target_entropy)
        self.delta = float(delta)
        self.min_coef = float(min_coef)
        self.max_coef = float(max_coef)
        self.coef = min(max(float(init_coef), self.min_coef), self.max_coef)
        self.enabled = False

    def update(self, current_entropy: float) -> None:
        """Move ``coef`` one ``delta`` towards more (below target) or less (at/above target) entropy bonus."""
        below = float(current_entropy) < self.target_entropy
        step = self.delta if below else -self.delta
        self.coef = min(max(self.coef + step, self.min_coef), self.max_coef)
        self.enabled = below

    @property
    def effective_coef(self) -> float:
        """The coefficient to pass to ``entropy_bonus``: ``coef`` while enabled, else 0."""
        return self.coef if self.enabled else 0.0

"""Log-probabilities (and entropies) of response tokens under a causal LM, for the padded and packed layouts.

Position convention (see ``reasonrl.models.batching``): the logits at position i predict token i + 1, so response
token t is scored with the logits of the position just before it. Outputs are float32 ``[batch, T]`` on the
response grid, aligned with ``batch.action_mask``, with zeros at masked positions.

Temperature. vLLM samples response tokens from ``softmax(z / T)`` (then top-k/top-p truncation), where z are the
raw logits and T the sampling temperature. PPO's importance ratio ``pi_theta(a|s) / pi_old(a|s)`` and the KL to
the reference must score tokens under that same tempered distribution::

    log p_T(a) = z_a / T - logsumexp(z / T)

so the policy's old and new log-probs (and the reference's) are computed here with ``temperature=T``, the value
vLLM sampled at. vLLM's default ``raw_logprobs`` (what ``reasonrl.dataplane.completion.Completion.logprobs`` holds) are
``log softmax(z)`` at temperature 1, BEFORE temperature and top-k/top-p: they equal ``response_logprobs(...,
temperature=1.0)`` and are the sampler's distribution only when T = 1 (ORZ samples at T = 1, top_p = 1,
top_k = -1). From raw log-probs alone p_T cannot be recovered (it needs logsumexp over all logits); vLLM's
``processed_logprobs`` mode reports the tempered, truncated ones. Top-k/top-p truncation is not modelled here.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from reasonrl.algos.entropy import entropy_from_logits
from reasonrl.models.batching import PackedBatch, PaddedBatch, scatter_to_padded

# Passed to every forward: no KV cache (memory; and a cache disables transformers' packed-sequence detection).
FORWARD_KWARGS = {"use_cache": False}


def _logprob_rows(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(z / T)[label] = z_label / T - logsumexp(z / T) for rows [n, vocab] -> [n] float32."""
    z = logits.float()
    if temperature != 1.0:
        z = z / temperature
    return z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(z, dim=-1)


def logprobs_from_logits(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, chunk_size: int = 1024
) -> torch.Tensor:
    """Log-probability of ``labels`` under ``softmax(logits / temperature)``: z_y / T - logsumexp(z / T).

    Args:
        logits: [..., vocab] (any float dtype; computed in float32).
        labels: [...] token ids, the same leading shape.
        temperature: T > 0 (1.0 = raw model distribution).
        chunk_size: rows (positions) processed at once.
    Returns:
        [...] float32 log-probs; exact (same value as ``log_softmax(z.float() / T).gather(labels)``) and
        differentiable with respect to ``logits``.

    Memory: rows go ``chunk_size`` at a time, so the float32 temporaries are [chunk_size, vocab] rather than a
    full [rows, vocab] upcast/log_softmax. With autograd each chunk is checkpointed, so backward keeps only the
    input logits and recomputes the chunk (peak extra memory O(chunk_size * vocab) there too).
    """
    if labels.shape != logits.shape[:-1]:
        raise ValueError(f"labels shape {tuple(labels.shape)} != logits shape[:-1] {tuple(logits.shape[:-1])}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be > 0, got {chunk_size}")
    rows = logits.reshape(-1, logits.shape[-1])  # [n, vocab]
    flat_labels = labels.reshape(-1).long()  # [n]
    use_checkpoint = torch.is_grad_enabled() and logits.requires_grad
    chunks = []
    for start in range(0, rows.shape[0], chunk_size):
        args = (rows[start : start + chunk_size], flat_labels[start : start + chunk_size], float(temperature))
        chunks.append(checkpoint(_logprob_rows, *args, use_reentrant=False) if use_checkpoint else _logprob_rows(*args))
    if not chunks:
        return torch.zeros(labels.shape, dtype=torch.float32, device=logits.device)
    return torch.cat(chunks).reshape(labels.shape)


def _logits_of(output) -> torch.Tensor:
    return output.logits if hasattr(output, "logits") else output["logits"]


def response_logits(
    model, batch: PaddedBatch | PackedBatch, *, use_logits_to_keep: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward the causal LM and return the logits that predict the response tokens, with those tokens.

    ``model`` is any callable ``model(input_ids=, attention_mask=, position_ids=, use_cache=False)`` returning an
    object with ``.logits`` (a transformers causal LM, or a DeepSpeed engine wrapping one); a packed batch built for
    flash-attention adds its ``PackedBatch.forward_kwargs`` (``cu_seq_lens_q/k``, ``max_length_q/k``). With
    ``use_logits_to_keep`` (the default) transformers' ``logits_to_keep`` is passed too, so the LM head runs only
    on the positions needed (saves the [prompt, vocab] logits; HF causal LMs accept it); ``False`` is for models
    whose forward does not take it.

    Returns:
        padded: (logits [batch, T, vocab], labels [batch, T]); positions beyond a response are junk (masked later).
        packed: (logits [1, N, vocab], labels [1, N]), N = sum of response lengths, sample-major.
    """
    if isinstance(batch, PaddedBatch):
        extra = {"logits_to_keep": batch.num_actions + 1} if use_logits_to_keep else {}
        out = model(**batch.model_inputs(), **FORWARD_KWARGS, **extra)  # a VLM batch adds its pixel inputs
        logits = _logits_of(out)  # [batch, P+T, vocab], or [batch, T+1, vocab] with logits_to_keep
        rows = logits[:, : batch.num_actions] if use_logits_to_keep else batch.response_slice(logits)
        return rows, batch.response_ids()  # [batch, T, vocab], [batch, T]
    if isinstance(batch, PackedBatch):
        extra = {"logits_to_keep": batch.response_positions} if use_logits_to_keep else {}
        extra |= batch.forward_kwargs()  # cu_seqlens for flash-attention, so no layer rebuilds them
        out = model(
            input_ids=batch.input_ids, attention_mask=None, position_ids=batch.position_ids, **FORWARD_KWARGS, **extra
        )
        logits = _logits_of(out)  # [1, total, vocab], or [1, N, vocab] with logits_to_keep
        rows = logits if use_logits_to_keep else batch.response_slice(logits).unsqueeze(0)
        return rows, batch.response_ids().unsqueeze(0)  # [1, N, vocab], [1, N]
    raise TypeError(f"batch must be a PaddedBatch or PackedBatch, got {type(batch).__name__}")


def _to_grid(per_token: torch.Tensor, batch: PaddedBatch | PackedBatch) -> torch.Tensor:
    """Padded [batch, T] or packed [1, N] -> [batch, T] with zeros where ``action_mask`` is False."""
    if isinstance(batch, PackedBatch):
        return scatter_to_padded(per_token[0], batch.action_mask)
    return torch.where(batch.action_mask, per_token, torch.zeros_like(per_token))


def response_logprobs(
    model,
    batch: PaddedBatch | PackedBatch,
    temperature: float = 1.0,
    with_entropy: bool = False,
    *,
    use_logits_to_keep: bool = True,
    chunk_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and optionally entropies) of the response tokens under ``softmax(logits / temperature)``.

    Args:
        model: see ``response_logits``. Runs in the caller's grad mode (wrap in ``torch.no_grad()`` for the
            reference / old-policy passes; leave grad on for the policy update).
        batch: ``PaddedBatch`` or ``PackedBatch`` (packed requires ``supports_packing`` for the model's backend).
        temperature: the sampling temperature vLLM used (module docstring).
        with_entropy: also return the entropy H of the tempered distribution at each response position,
            computed by ``reasonrl.algos.entropy.entropy_from_logits`` (chunked). With T != 1 this divides a
            copy of the response logits in their own dtype before the float32 upcast (log-probs scale in float32).
    Returns:
        (logprobs [batch, T] float32, entropy [batch, T] float32 or None), zeros where ``action_mask`` is False.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rows, labels = response_logits(model, batch, use_logits_to_keep=use_logits_to_keep)
    logprobs = _to_grid(logprobs_from_logits(rows, labels, temperature, chunk_size), batch)
    entropy = None
    if with_entropy:
        scaled = rows if temperature == 1.0 else rows / temperature  # a copy of the response logits only
        entropy = _to_grid(entropy_from_logits(scaled, chunk_size), batch)
    return logprobs, entropy

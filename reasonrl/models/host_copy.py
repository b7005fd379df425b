"""A plain causal LM assembled from full weight tensors held in memory (no file, no copy of the tensors).

The weight sync verifies each sync by scoring a short probe sequence on the weights it just sent; with ZeRO-3
over gloo (CPU) this is much cheaper than a forward of the partitioned training model, which gathers every layer
again. Build it outside any ZeRO-3 ``HfDeepSpeedConfig`` context (``deepspeed_engine.no_zero3_init``), or
transformers would partition it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch


def model_from_tensors(
    config, params: Mapping[str, torch.Tensor], buffers: Mapping[str, torch.Tensor], attn_implementation: str = "sdpa"
):
    """A causal LM of ``config`` whose parameters ARE ``params`` (``named_parameters()`` names, tied weights once)
    and whose buffers are ``buffers`` (all of them, non-persistent ones such as rotary ``inv_freq`` included).

    The skeleton is built on the meta device (no allocation), then the tensors are assigned. Raises ValueError
    naming what is missing when a parameter or buffer is left unset.
    """
    from reasonrl.models.vision import auto_model_class

    dtype = next(iter(params.values())).dtype
    # a copy: transformers' from_config keeps the config it is given and writes attn_implementation into it, and
    # ``config`` is usually the training model's own (which would then run this probe's attention from its next
    # forward on: eager or Ulysses turned into sdpa after the first sync, measured)
    config = copy.deepcopy(config)
    with torch.device("meta"):
        model = auto_model_class(config).from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    result = model.load_state_dict(dict(params), strict=False, assign=True)
    if result.unexpected_keys:
        raise ValueError(f"model_from_tensors: tensors that are not parameters of the model: {result.unexpected_keys}")
    for name, buffer in buffers.items():
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._buffers[leaf] = buffer
    model.tie_weights()
    unset = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if unset:
        raise ValueError(f"model_from_tensors: no tensor given for {unset[:5]} ({len(unset)} in all)")
    return model.eval()


@torch.no_grad()
def sequence_logprobs(
    model, token_ids: Sequence[int], pixel_inputs: Mapping[str, torch.Tensor] | None = None
) -> list[float]:
    """log p(token_t | token_<t) for t = 1..len-1 (teacher forcing, temperature 1): what vLLM's prompt log-probs
    return for the same sequence. ``pixel_inputs``: a VLM's pixel inputs for the sequence's image tokens
    (``models.vision.VisionInputs`` of its pictures)."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(token_ids)], device=device)
    extra = {k: v.to(device) for k, v in (pixel_inputs or {}).items()}
    logits = model(input_ids=ids, **extra).logits[0, :-1].float()  # [len - 1, vocab]
    return torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0].tolist()

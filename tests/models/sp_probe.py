"""Run by test_models_sequence_parallel.py: one rank of a 2-rank gloo group comparing Ulysses SP = 2 with SP = 1.

Every rank loads the tiny Qwen2 model (fp32) twice: a plain copy (the SP = 1 reference, transformers' own sdpa or
eager attention on the whole micro-batch) and a copy switched to Ulysses attention, run on half the positions.
For each case (layout padded / packed, core sdpa / eager; and padded sdpa with activation checkpointing) it
measures the max abs difference of

* per-token log-probs (temperature 0.7) and entropies on the response grid;
* the parameter gradients of a GRPO-like loss (clipped ratio surrogate with per-sample advantages, a loss mask
  with holes, an entropy bonus): the SP group's gradients summed over ranks (the engine's reduction within an SP
  group, ``reasonrl.models.sequence_parallel``) against the reference's;
* critic values and the gradients of a masked value loss (``CriticModel`` on the same backbone).

Rank 0 writes ``{case: {metric: max_abs_diff}}`` as JSON to the output path.

Usage: python sp_probe.py <rank> <world_size> <file_store_path> <out_json>
"""

from __future__ import annotations

import json
import sys


def _samples():
    """Three samples of unequal prompt and response lengths: left padding (short prompts) and right padding (short
    responses) in the padded layout; widths 10 + 9 = 19 padded and 41 packed, odd so the SP pad-to-2 runs."""
    prompts = [[5, 17, 23, 42, 7, 9, 11, 13, 3, 4], [8, 19, 5], [31, 32, 33, 34, 35, 36]]
    responses = [[100, 101, 102, 103, 104, 105, 106, 107, 108], [200, 201, 202, 203], [300, 301, 302, 303, 304]]
    return list(zip(prompts, responses, strict=True))


def _loss_mask(action_mask):
    """action_mask with holes (tokens of a multi-turn response not trained on): columns 2 and 3 of every row."""
    mask = action_mask.clone()
    mask[:, 2:4] = False
    return mask


def _policy_loss(logprobs, entropy, action_mask):
    """GRPO-like: -mean over the loss mask of min(r A, clip(r, 0.8, 1.2) A) - 0.01 H, r = exp(lp - old)."""
    import torch

    mask = _loss_mask(action_mask)
    old = logprobs.detach() + 0.05 * torch.cos(torch.arange(logprobs.numel()).reshape(logprobs.shape).float())
    adv = torch.tensor([1.0, -0.5, 0.3])[: logprobs.shape[0], None]  # [batch, 1]
    ratio = torch.exp(logprobs - old)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    per_token = -surrogate - 0.01 * entropy
    return (per_token * mask).sum() / mask.sum()


def _value_loss(values, action_mask):
    """0.5 * mean over the loss mask of (V - R)^2 with fixed returns R."""
    import torch

    mask = _loss_mask(action_mask)
    returns = torch.linspace(-1.0, 1.0, values.numel()).reshape(values.shape)
    return 0.5 * (((values - returns) ** 2) * mask).sum() / mask.sum()


def _grad_diff(sp_model, ref_model, group) -> float:
    """max |sum over SP ranks of grad - reference grad| over all parameters (grads of SP summed in place)."""
    import torch.distributed as dist

    worst = 0.0
    ref = dict(ref_model.named_parameters())
    for name, param in sp_model.named_parameters():
        dist.all_reduce(param.grad, group=group)
        worst = max(worst, (param.grad - ref[name].grad).abs().max().item())
    return worst


def main(rank: int, world: int, store_path: str, out: str) -> None:
    import torch
    import torch.distributed as dist
    from transformers import AutoModel, AutoModelForCausalLM

    from reasonrl.models import tiny_model_path
    from reasonrl.models.batching import pack_batch, pad_batch
    from reasonrl.models.critic import CriticModel, response_values
    from reasonrl.models.logprobs import response_logprobs
    from reasonrl.models.sequence_parallel import sp_response_logprobs, sp_response_values
    from reasonrl.models.ulysses_attention import use_ulysses_attention

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    group = dist.group.WORLD
    path = tiny_model_path()
    samples = _samples()
    results = {}
    cases = [("padded", "sdpa", False), ("packed", "sdpa", False), ("padded", "eager", False)]
    cases += [("packed", "eager", False), ("padded", "sdpa", True), ("single", "sdpa", False)]
    for layout, core, recompute in cases:
        if layout == "single":  # one sample, no padding: the causal fast path (no [S, S] mask)
            batch = pad_batch(samples[:1], pad_token_id=0)
        else:
            batch = pad_batch(samples, pad_token_id=0) if layout == "padded" else pack_batch(samples)
        ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=core)
        sp = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=core)
        use_ulysses_attention(sp, core)
        if recompute:  # activation checkpointing (the policy's default): the layers rerun in backward, in train mode
            for model in (ref, sp):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                model.train()
        lp_ref, ent_ref = response_logprobs(ref, batch, temperature=0.7, with_entropy=True)
        lp_sp, ent_sp = sp_response_logprobs(sp, batch, group, temperature=0.7, with_entropy=True, chunk_size=4)
        _policy_loss(lp_ref, ent_ref, batch.action_mask).backward()
        _policy_loss(lp_sp, ent_sp, batch.action_mask).backward()
        case = {
            "logprobs": (lp_sp - lp_ref).abs().max().item(),
            "entropy": (ent_sp - ent_ref).abs().max().item(),
            "policy_grads": _grad_diff(sp, ref, group),
            "max_policy_grad": max(p.grad.abs().max().item() for p in ref.parameters()),
            "masked_zero": bool((lp_sp[~batch.action_mask] == 0).all()),
        }
        critic_ref = CriticModel(AutoModel.from_pretrained(path, dtype=torch.float32, attn_implementation=core))
        critic_sp = CriticModel(AutoModel.from_pretrained(path, dtype=torch.float32, attn_implementation=core))
        use_ulysses_attention(critic_sp.backbone, core)
        v_ref, v_sp = response_values(critic_ref, batch), sp_response_values(critic_sp, batch, group)
        _value_loss(v_ref, batch.action_mask).backward()
        _value_loss(v_sp, batch.action_mask).backward()
        case["values"] = (v_sp - v_ref).abs().max().item()
        case["critic_grads"] = _grad_diff(critic_sp, critic_ref, group)
        results[f"{layout}-{core}{'-checkpointed' if recompute else ''}"] = case
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])

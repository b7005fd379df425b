"""Run by test_distributed_sequence_parallel.py: one rank of 2 (gloo), Ulysses SP = 2 inside a DeepSpeed engine
(ZeRO-3 in the test) against plain data parallelism (SP = 1) on the same two micro-batches.

Micro-batch A belongs to rank 0, B to rank 1 (as the driver's shards would). Two engines of the tiny Qwen2 model
(fp32, no clipping, the ZeRO stage given):

* ``dp`` (SP = 1): rank r forwards its own micro-batch; ``backward(loss_r * world_size)``.
* ``sp`` (SP = 2, the "group rounds" a worker would run): both ranks forward A, then B, with
  ``sp_response_logprobs`` called with the ENGINE (each rank half of the positions; through ``engine.forward``,
  without which ZeRO-3 kept only the second micro-batch's gradient); ``backward(loss_j * world_size)`` for both, the
  accumulation boundary on the last. Each micro-batch's gradient shares sum over the two ranks to its full gradient,
  and DeepSpeed's average over the 2 ranks of loss * 2 gives the sum over micro-batches: the dp gradient.

The loss is GRPO-like (clipped ratio with advantages, a loss mask with holes) normalised by the global token count
of A and B, as the workers do; then the same for two ``CriticModel`` engines and a masked value loss. Measured: the
log-probs (values) of each micro-batch (sp against dp), the fp32 gradients the optimizer sees
(``deepspeed.utils.safe_get_full_grad``, after the boundary, before the step), max abs diffs. Rank 0 writes them as
JSON.

Usage: python sp_ds_probe.py <rank> <world_size> <port> <zero_stage> <out_json>
"""

from __future__ import annotations

import json
import sys

SAMPLES = {  # rank -> its micro-batch: (prompt, response) pairs of unequal lengths (left and right padding)
    0: [([5, 17, 23, 42, 7, 9, 11], [100, 101, 102, 103, 104, 105]), ([8, 19, 5], [200, 201, 202])],
    1: [([31, 32, 33, 34], [300, 301, 302, 303, 304, 305, 306]), ([40, 41, 42, 43, 44, 45], [400, 401])],
}


def _mask(action_mask):
    """The loss mask: action_mask with a hole at response columns 1-2 (a multi-turn tool reply)."""
    mask = action_mask.clone()
    mask[:, 1:3] = False
    return mask


def _loss(logprobs, action_mask, global_tokens: int):
    """sum over the loss mask of -min(r A, clip(r, 0.8, 1.2) A) / global_tokens, r = exp(lp - old)."""
    import torch

    old = logprobs.detach() + 0.05 * torch.sin(torch.arange(logprobs.numel()).reshape(logprobs.shape).float())
    adv = torch.linspace(-1.0, 1.0, logprobs.shape[0])[:, None]
    ratio = torch.exp(logprobs - old)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
    return -(surrogate * _mask(action_mask)).sum() / global_tokens


def _engine(path: str, cfg: dict):
    from reasonrl.distributed import deepspeed_engine as ds

    model, hf_cfg = ds.load_causal_lm(path, cfg)
    opt = ds.make_optimizer(model, lr=1e-5, ds_config=cfg, impl="torch")
    return ds.initialize(model, cfg, opt), hf_cfg


def _critic_engine(path: str, cfg: dict):
    from reasonrl.distributed import deepspeed_engine as ds
    from reasonrl.models.critic import load_critic

    hf_cfg = ds.hf_zero3_config(cfg)  # partitions the backbone at load time (kept referenced by the caller)
    critic = load_critic(path, seed=0)
    opt = ds.make_optimizer(critic, lr=1e-5, ds_config=cfg, impl="torch")
    return ds.initialize(critic, cfg, opt), hf_cfg


def _value_loss(values, action_mask, global_tokens: int):
    """0.5 * sum over the loss mask of (V - R)^2 / global_tokens, fixed returns R in [-1, 1]."""
    import torch

    returns = torch.linspace(-1.0, 1.0, values.numel()).reshape(values.shape)
    return 0.5 * (((values - returns) ** 2) * _mask(action_mask)).sum() / global_tokens


def _full_grads(engine) -> dict:
    """Every parameter's whole fp32 gradient as the optimizer sees it (a ZeRO-3 gather: collective)."""
    from deepspeed.utils import safe_get_full_grad

    return {name: safe_get_full_grad(p).clone() for name, p in engine.module.named_parameters()}


def main(rank: int, world: int, port: int, stage: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from reasonrl.distributed import deepspeed_engine as ds
    from reasonrl.distributed import ds_config
    from reasonrl.models import tiny_model_path
    from reasonrl.models.batching import pad_batch
    from reasonrl.models.critic import response_values
    from reasonrl.models.logprobs import response_logprobs
    from reasonrl.models.sequence_parallel import sp_response_logprobs, sp_response_values
    from reasonrl.models.ulysses_attention import use_ulysses_attention

    ds.init_distributed(rank, world, "127.0.0.1", port, timeout_s=120)
    torch.set_num_threads(1)
    path = str(tiny_model_path())
    cfg = ds_config.build_ds_config(zero_stage=stage, world_size=world, grad_clip=0.0)
    batches = {r: pad_batch(s, pad_token_id=0) for r, s in SAMPLES.items()}
    global_tokens = sum(int(_mask(b.action_mask).sum()) for b in batches.values())

    dp, _keep_dp = _engine(path, cfg)
    dp.train()
    lp_dp, _ = response_logprobs(dp, batches[rank], 1.0)
    ds.backward(dp, _loss(lp_dp, batches[rank].action_mask, global_tokens) * world, is_last=True)
    grads_dp = _full_grads(dp)
    lps_dp = [lp_dp.detach() if r == rank else torch.empty(batches[r].action_mask.shape) for r in range(world)]
    for r in range(world):  # every rank's own-micro-batch log-probs, for the comparison
        dist.broadcast(lps_dp[r], src=r)

    sp, _keep_sp = _engine(path, cfg)
    use_ulysses_attention(sp.module, "sdpa")
    sp.train()
    group = dist.group.WORLD
    lp_diff = 0.0
    for j in range(world):  # the group's rounds: every rank runs member j's micro-batch
        lp_sp, _ = sp_response_logprobs(sp, batches[j], group, 1.0, chunk_size=4)  # through the engine
        lp_diff = max(lp_diff, (lp_sp.detach() - lps_dp[j]).abs().max().item())
        ds.backward(sp, _loss(lp_sp, batches[j].action_mask, global_tokens) * world, is_last=j == world - 1)
    grads_sp = _full_grads(sp)

    # the critic the same way: values and the reduced gradients of a value loss
    cdp, _keep_cdp = _critic_engine(path, cfg)
    cdp.train()
    v_dp = response_values(cdp, batches[rank])
    ds.backward(cdp, _value_loss(v_dp, batches[rank].action_mask, global_tokens) * world, is_last=True)
    cgrads_dp = _full_grads(cdp)
    vs_dp = [v_dp.detach() if r == rank else torch.empty(batches[r].action_mask.shape) for r in range(world)]
    for r in range(world):
        dist.broadcast(vs_dp[r], src=r)
    csp, _keep_csp = _critic_engine(path, cfg)
    use_ulysses_attention(csp.module.backbone, "sdpa")
    csp.train()
    v_diff = 0.0
    for j in range(world):
        v_sp = sp_response_values(csp, batches[j], group)  # through the engine
        v_diff = max(v_diff, (v_sp.detach() - vs_dp[j]).abs().max().item())
        ds.backward(csp, _value_loss(v_sp, batches[j].action_mask, global_tokens) * world, is_last=j == world - 1)
    cgrads_sp = _full_grads(csp)
    result = {
        "logprobs": lp_diff,
        "grads": max((grads_sp[n] - g).abs().max().item() for n, g in grads_dp.items()),
        "max_grad": max(g.abs().max().item() for g in grads_dp.values()),
        "params": len(grads_dp),
        "values": v_diff,
        "critic_grads": max((cgrads_sp[n] - g).abs().max().item() for n, g in cgrads_dp.items()),
        "max_critic_grad": max(g.abs().max().item() for g in cgrads_dp.values()),
        "critic_params": len(cgrads_dp),
    }
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.barrier()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])

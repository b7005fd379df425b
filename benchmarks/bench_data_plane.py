"""Driver cost of the experience data plane for one PPO step: bytes sent to the workers and driver seconds.

    python benchmarks/bench_data_plane.py                                  # 8192 samples x up to 8000 tokens
    python benchmarks/bench_data_plane.py --samples 1024 --max-len 4000 --epochs 1 --mini-batches 2

Compares, on a synthetic step (prompts of 200-500 tokens, long-tailed responses up to ``--max-len`` tokens, every
per-token field present: old/ref log-probs, values, advantages, returns):

* OLD dispatch (before the ragged data plane): each forward role sends each rank its samples as Python lists and
  gets back a padded ``[n, T]`` float32 tensor; each update sends, per role, per epoch and per mini-batch, every
  rank a padded :class:`Experience` (``mini.shard()``: Python-list samples + six dense ``[n, T]`` tensors).
* NEW dispatch: one :class:`RaggedShard` per rank (flat int32 tokens, flat float32 fields over response tokens)
  put once per step and world size for the forwards (token ids only) and once for the updates (with the fields);
  each mini-batch then sends only per-rank position lists; the forwards return flat float32 outputs.

No Ray session is started: ``pickle.dumps`` (protocol 5) sizes stand in for Ray's serialisation, which pickles the
same objects (tensors as their raw buffers). "Sent" counts what the driver serialises; "delivered" counts what the
workers read (a ref shared by two roles is read twice, from the node's object store). Driver seconds are building
the payloads plus serialising them. Also times ``reasonrl.algos.advantages.gae_advantages`` on the padded batch.
"""

from __future__ import annotations

import argparse
import pickle
import time
import types

import numpy as np
import torch

from reasonrl.dataplane.experience import FLOAT_FIELDS, Experience
from reasonrl.dataplane.sharding import stitch_rank_outputs
from reasonrl.loop.mini_batches import mini_batch_counts, mini_batch_order, rank_mini_batches


def synthetic_step(num_samples: int, max_len: int, seed: int = 0) -> Experience:
    """Prompts ~U[200, 500] tokens; responses log-normal (median ~max_len/4) with ~8% truncated at the cap."""
    rng = np.random.default_rng(seed)
    prompt_lens = rng.integers(min(200, max_len // 4), min(500, max_len // 2) + 1, num_samples)
    response_lens = np.minimum(rng.lognormal(np.log(max_len / 4), 0.8, num_samples).astype(np.int64) + 1, max_len)
    samples = [
        (rng.integers(3, 50_000, p).tolist(), rng.integers(3, 50_000, r).tolist())
        for p, r in zip(prompt_lens, response_lens, strict=True)
    ]
    width = int(response_lens.max())
    lengths = torch.from_numpy(response_lens)
    mask = torch.arange(width)[None, :] < lengths[:, None]
    gen = torch.Generator().manual_seed(seed)
    fields = {name: torch.randn(num_samples, width, generator=gen).masked_fill_(~mask, 0.0) for name in FLOAT_FIELDS}
    return Experience(samples, mask, **fields)


def dumps(obj) -> int:
    return len(pickle.dumps(obj, protocol=5))


def old_dispatch(exp: Experience, forward_sizes: dict, update_sizes: dict, epochs: int, bounds, cfg) -> dict:
    """What the padded path sent: forward args (+ dense returns), then per role/epoch/mini-batch ``mini.shard()``."""
    sent = 0
    start = time.perf_counter()
    lengths = torch.tensor([len(r) for _, r in exp.samples])
    width = exp.action_mask.shape[1]
    returned = 0
    for size in forward_sizes.values():
        shards = exp.shard_indices(size)
        parts = []
        for idx in shards:
            sent += dumps([exp.samples[i] for i in idx])
            parts.append(exp.old_logprobs[idx, : int(lengths[idx].max())])  # what the rank returned: [n_i, T_i]
            returned += parts[-1].numel() * 4
        # the old driver-side stitch of dense parts
        out = torch.zeros(len(exp), width)
        for part, idx in zip(parts, shards, strict=True):
            out[idx, : part.shape[1]] = part
    forward_s = time.perf_counter() - start
    start = time.perf_counter()
    for role, size in update_sizes.items():
        for epoch in range(epochs):
            order = mini_batch_order(cfg, role, 0, epoch, len(exp), len(bounds))
            for lo, hi in bounds:
                mini = exp.select(order[lo:hi])
                mini.num_tokens_and_seqs()
                for shard in mini.shard(size):
                    sent += dumps(shard)
    update_s = time.perf_counter() - start
    return {"sent": sent, "delivered": sent, "returned": returned, "forward_s": forward_s, "update_s": update_s}


def new_dispatch(exp: Experience, forward_sizes: dict, update_sizes: dict, epochs: int, bounds, cfg) -> dict:
    """The ragged data plane: one shard per rank per world size, mini-batches as per-rank position lists."""
    sent = delivered = returned = 0
    lengths = torch.tensor([len(r) for _, r in exp.samples])
    width = exp.action_mask.shape[1]
    start = time.perf_counter()
    for size in set(forward_sizes.values()):
        readers = sum(1 for s in forward_sizes.values() if s == size)
        shards = exp.shard_indices(size)
        parts = []
        for idx in shards:
            nbytes = dumps(exp.ragged(idx, with_fields=False))
            sent, delivered = sent + nbytes, delivered + nbytes * readers
            parts.append(exp.old_logprobs[idx][exp.action_mask[idx]])  # what the rank returns: flat float32
            returned += parts[-1].numel() * 4 * readers
        stitch_rank_outputs(parts, lengths, width, shards)
    forward_s = time.perf_counter() - start
    start = time.perf_counter()
    shards_of = {}
    for size in set(update_sizes.values()):
        readers = sum(1 for s in update_sizes.values() if s == size)
        shards_of[size] = exp.shard_indices(size)
        for idx in shards_of[size]:
            nbytes = dumps(exp.ragged(idx))
            sent, delivered = sent + nbytes, delivered + nbytes * readers
    resp = lengths.tolist()
    for role, size in update_sizes.items():
        shards = shards_of[size]
        for epoch in range(epochs):
            for per_rank in rank_mini_batches(cfg, role, 0, epoch, [len(s) for s in shards], bounds):
                mini_batch_counts(shards, per_rank, resp)  # the global counts
                for local in per_rank:
                    nbytes = dumps(local)
                    sent, delivered = sent + nbytes, delivered + nbytes
    update_s = time.perf_counter() - start
    return {"sent": sent, "delivered": delivered, "returned": returned, "forward_s": forward_s, "update_s": update_s}


def time_gae(exp: Experience) -> float:
    from reasonrl.algos.advantages import gae_advantages

    lengths = exp.action_mask.sum(-1)
    rewards = torch.zeros_like(exp.old_values)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    rewards[rows, lengths[rows] - 1] = 1.0  # outcome reward on the last response token
    start = time.perf_counter()
    gae_advantages(token_rewards=rewards, action_mask=exp.action_mask, values=exp.old_values, gamma=1.0, lam=0.95)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--max-len", type=int, default=8000, help="longest response (tokens)")
    parser.add_argument("--policy-ranks", type=int, default=8)
    parser.add_argument("--critic-ranks", type=int, default=8)
    parser.add_argument("--ref-ranks", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--mini-batches", type=int, default=4)
    parser.add_argument("--skip-gae", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(2)
    start = time.perf_counter()
    exp = synthetic_step(args.samples, args.max_len)
    lengths = torch.tensor([len(r) for _, r in exp.samples])
    prompts = sum(len(p) for p, _ in exp.samples)
    print(
        f"step: {len(exp)} samples, {prompts + int(lengths.sum()):,} tokens ({int(lengths.sum()):,} response tokens, "
        f"longest {int(lengths.max())}, median {int(lengths.median())}); padded [{len(exp)}, "
        f"{exp.action_mask.shape[1]}]; built in {time.perf_counter() - start:.1f}s"
    )
    n, k = len(exp), args.mini_batches
    bounds = [(round(i * n / k), round((i + 1) * n / k)) for i in range(k)]
    cfg = types.SimpleNamespace(seed=0, shuffle_mini_batches=True)
    forward_sizes = {"policy": args.policy_ranks, "ref": args.ref_ranks, "critic": args.critic_ranks}
    update_sizes = {"policy": args.policy_ranks, "critic": args.critic_ranks}
    print(
        f"ranks: policy {args.policy_ranks}, ref {args.ref_ranks}, critic {args.critic_ranks}; "
        f"{args.epochs} epoch(s) x {k} mini-batch(es) per updated role"
    )
    results = {
        "OLD": old_dispatch(exp, forward_sizes, update_sizes, args.epochs, bounds, cfg),
        "NEW": new_dispatch(exp, forward_sizes, update_sizes, args.epochs, bounds, cfg),
    }
    gib = 1024**3
    header = (
        f"{'sent GiB':>9s} {'delivered GiB':>14s} {'returned GiB':>13s} {'fwd s':>7s} {'upd s':>7s} {'total s':>8s}"
    )
    print(f"{'':4s} {header}")
    for name, r in results.items():
        print(
            f"{name:4s} {r['sent'] / gib:9.3f} {r['delivered'] / gib:14.3f} {r['returned'] / gib:13.3f} "
            f"{r['forward_s']:7.2f} {r['update_s']:7.2f} {r['forward_s'] + r['update_s']:8.2f}"
        )
    old, new = results["OLD"], results["NEW"]
    print(
        f"NEW/OLD: sent x{new['sent'] / old['sent']:.3f}, delivered x{new['delivered'] / old['delivered']:.3f}, "
        f"driver time x{(new['forward_s'] + new['update_s']) / (old['forward_s'] + old['update_s']):.3f}"
    )
    if not args.skip_gae:
        print(f"gae_advantages on the padded {tuple(exp.action_mask.shape)} batch: {time_gae(exp):.2f}s")


if __name__ == "__main__":
    main()

"""Peak memory and time of one policy forward + backward on a long sequence, SP = 1 against Ulysses SP = 2 (CPU, gloo).

    python benchmarks/bench_sequence_parallel.py                     # 1 sample, 4096 tokens, 3 repetitions
    python benchmarks/bench_sequence_parallel.py --tokens 8192 --reps 2
    python benchmarks/bench_sequence_parallel.py --sequences 4        # 4 sequences of 1024 packed in one row

What one rank holds is what sequence parallelism is for: at SP = N each rank runs the decoder on S / N positions, so
its activations (hidden states, MLP, norms, the LM head's chunks) shrink N-fold; the attention core still sees the
whole row for its heads / N, causal within each sequence's span (no [S, S] mask; one core call per packed
sequence with ``--sequences``, where SP = 1 runs transformers' own sdpa with its packed block mask). Each configuration
runs in fresh processes (``ru_maxrss`` is a high-water mark), one torch thread per rank, with activation
checkpointing off (the worst case for activations): SP = 1 is one process on the whole sequence with transformers'
own sdpa; SP = 2 is two processes of one gloo group, each on half the positions (``sp_response_logprobs``).
Printed per configuration: the rank's peak resident memory above what it held before the forward (MiB, the largest
over ranks), and the median wall time of forward + backward.

The model: a Qwen2 of the tiny tokenizer, 8 layers, hidden 512, 8 query / 4 key-value heads, random init (no
download). Numbers are for this shape on this machine's CPU; on GPUs the ratio of activation memory is the point,
not the time (the all-to-alls then run over NVLink / the network instead of shared memory).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def model_config(vocab: int, positions: int):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=positions,
        tie_word_embeddings=False,
    )


def rank_main(rank: int, world: int, store: str, tokens: int, sequences: int, reps: int, out: str) -> None:
    import resource

    import torch
    import torch.distributed as dist
    from transformers import Qwen2ForCausalLM

    from reasonrl.models.batching import pack_batch, pad_batch
    from reasonrl.models.logprobs import response_logprobs
    from reasonrl.models.sequence_parallel import sp_response_logprobs
    from reasonrl.models.ulysses_attention import use_ulysses_attention

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if world > 1:
        dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    model = Qwen2ForCausalLM(model_config(2048, tokens + 64)).float()
    model.config._attn_implementation = "sdpa"
    if world > 1:
        use_ulysses_attention(model, "sdpa")
    g = torch.Generator().manual_seed(1)
    each = tokens // sequences
    samples = [
        (
            torch.randint(3, 2048, (64,), generator=g).tolist(),
            torch.randint(3, 2048, (each - 64,), generator=g).tolist(),
        )
        for _ in range(sequences)
    ]
    batch = pad_batch(samples, pad_token_id=0) if sequences == 1 else pack_batch(samples)  # one row of `tokens`
    times = []
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(reps):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        if world > 1:
            logprobs, _ = sp_response_logprobs(model, batch, dist.group.WORLD)
        else:
            logprobs, _ = response_logprobs(model, batch)
        (-(logprobs * batch.action_mask).sum() / batch.action_mask.sum()).backward()
        times.append(time.perf_counter() - start)
    peak_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    result = {"rank": rank, "peak_mib": peak_mib, "median_s": statistics.median(times)}
    Path(f"{out}.{rank}").write_text(json.dumps(result))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def run(world: int, tokens: int, sequences: int, reps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out, store = str(Path(tmp) / "r"), str(Path(tmp) / "store")
        # large blocks mmapped (freed to the OS at once), so the high-water RSS above the loaded model is what the
        # forward + backward held: activations, and the gradients once backward allocates them (set to None before)
        env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536")
        cmd = [sys.executable, __file__, "--rank-of", str(world), "--store", store, "--out", out]
        cmd += ["--tokens", str(tokens), "--sequences", str(sequences), "--reps", str(reps)]
        procs = [subprocess.Popen([*cmd, "--rank", str(r)], env=env) for r in range(world)]
        for p in procs:
            if p.wait() != 0:
                raise SystemExit(f"a rank of SP={world} failed ({p.returncode})")
        results = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(world)]
    return {"peak_mib": max(r["peak_mib"] for r in results), "median_s": max(r["median_s"] for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--sequences", type=int, default=1, help="pack this many sequences of tokens / K in the row")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rank-of", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sequences < 1 or args.tokens % args.sequences or args.tokens // args.sequences <= 64:
        parser.error("--sequences must divide --tokens into samples of more than 64 tokens (a 64-token prompt each)")
    if args.rank is not None:
        rank_main(args.rank, args.rank_of, args.store, args.tokens, args.sequences, args.reps, args.out)
        return
    rows = {sp: run(sp, args.tokens, args.sequences, args.reps) for sp in (1, 2)}
    what = "one sample" if args.sequences == 1 else f"{args.sequences} samples packed in one row"
    print(f"{what} of {args.tokens} tokens, forward + backward, fp32, 1 thread per rank, no checkpointing")
    print(f"{'':8s} {'peak MiB per rank':>18s} {'median s':>9s}")
    for sp, r in rows.items():
        print(f"SP = {sp:<3d} {r['peak_mib']:18.0f} {r['median_s']:9.2f}")
    memory, seconds = rows[2]["peak_mib"] / rows[1]["peak_mib"], rows[2]["median_s"] / rows[1]["median_s"]
    print(f"SP = 2 / SP = 1: memory {memory:.2f}x, time {seconds:.2f}x")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()

"""The cost of the multi-turn loop against single-turn generation of the same number of model tokens.

    python benchmarks/bench_multi_turn.py                         # tiny model, 16 prompts x 4, 4 turns
    python benchmarks/bench_multi_turn.py --env-latency-ms 50     # each environment step sleeps 50 ms

One vLLM engine in this process behind a stand-in for its Ray actor handle (``.remote`` runs the method in a thread),
so both paths pay no Ray overhead. Multi-turn: ``MultiTurnRollout`` with a scripted environment answering every turn
with a short observation (``max_turns`` turns; the random model's turns end at a stop string, a newline by default).
Single-turn: the same prompts, ``max_tokens`` = the multi-turn run's mean model tokens per sample, EOS ignored.
Prints model tokens per second of each, the ratio, and the environment time that was not hidden behind generation.
The first call of each path is a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from types import SimpleNamespace

from reasonrl.distributed.platform import apply_runtime_env

apply_runtime_env()


class ScriptedEnv:
    def __init__(self, latency_s: float):
        self.latency_s = latency_s

    def reset(self, row):
        self.turn = 0

    def step(self, model_turn):
        from reasonrl.agents.environment import StepResult

        time.sleep(self.latency_s)
        self.turn += 1
        return StepResult(observation=f"result {self.turn}: 4517277")


def actor(engine):
    """A stand-in for the engine's Ray actor handle: ``handle.method.remote(...)`` awaits the method in a thread."""
    return SimpleNamespace(
        pump=SimpleNamespace(remote=lambda *a: asyncio.to_thread(engine.pump, *a)),
        abort_pumped=SimpleNamespace(remote=lambda: asyncio.to_thread(engine.abort_pumped)),
    )


async def multi_turn(rollout, handle, rows, ids, sampling):
    from reasonrl.loop.multi_turn import EnvTimes

    times = EnvTimes()
    done = []
    async for part in rollout.engine_part(handle, rows, ids, 0, sampling, times):
        done += part
    return done, times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--budget", type=int, default=128)
    parser.add_argument("--env-latency-ms", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stop", default="\n", help="the stop string that ends a model turn of the random model")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from reasonrl.distributed.vllm_engine import SamplingConfig, VLLMEngine
    from reasonrl.loop.multi_turn import MultiTurnRollout, MultiTurnSettings
    from reasonrl.models import tiny_model_path

    path = str(tiny_model_path())
    tok = AutoTokenizer.from_pretrained(path)
    rows = [{"question": f"What is {i} * {3 * i + 7}?"} for i in range(args.prompts)]
    ids = [
        tok(
            tok.apply_chat_template(
                [{"role": "user", "content": r["question"]}], tokenize=False, add_generation_prompt=True
            ),
            add_special_tokens=False,
        ).input_ids
        for r in rows
    ]
    engine = VLLMEngine(path, dtype="float32", max_model_len=512)
    settings = MultiTurnSettings(
        env_factory=lambda: ScriptedEnv(args.env_latency_ms / 1000), max_turns=args.turns, max_observation_tokens=32
    )
    rollout = MultiTurnRollout(settings, tok)
    handle = actor(engine)
    turn_sampling = SamplingConfig(
        n=args.n, temperature=1.0, max_tokens=args.budget, stop=[args.stop], include_stop_str_in_output=True, seed=0
    )
    mt_tokens = mt_s = st_tokens = st_s = exposed = env_s = 0.0
    turns = 0.0
    for repeat in range(args.repeats + 1):
        start = time.perf_counter()
        done, times = asyncio.run(multi_turn(rollout, handle, rows, ids, turn_sampling))
        elapsed = time.perf_counter() - start
        model_tokens = sum(sum(c.loss_mask) if c.loss_mask else len(c.token_ids) for c in done)
        per_sample = max(1, round(model_tokens / len(done)))
        single = SamplingConfig(n=args.n, temperature=1.0, max_tokens=per_sample, seed=0, ignore_eos=True)
        start = time.perf_counter()
        plain = engine.generate(ids, single)
        single_s = time.perf_counter() - start
        if repeat == 0:
            continue  # warm-up
        mt_tokens += model_tokens
        mt_s += elapsed
        st_tokens += sum(len(c.token_ids) for c in plain)
        st_s += single_s
        exposed += times.exposed_s
        env_s += times.env_s
        turns += sum(sum(t["role"] == "assistant" for t in c.turns) for c in done) / len(done)
    print(f"{args.prompts} prompts x {args.n} samples, up to {args.turns} turns, env latency {args.env_latency_ms} ms")
    print(f"  multi-turn : {mt_tokens / mt_s:8.1f} model tokens/s  ({turns / args.repeats:.2f} turns per sample)")
    print(f"  single-turn: {st_tokens / st_s:8.1f} tokens/s on the same number of tokens per sample")
    print(f"  ratio      : {(mt_tokens / mt_s) / (st_tokens / st_s):.2f}")
    print(
        f"  environment: {env_s / args.repeats:.2f} s per rollout in steps, {exposed / args.repeats:.2f} s not hidden"
    )


if __name__ == "__main__":
    main()

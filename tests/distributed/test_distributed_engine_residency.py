"""EngineResidency: the sleep state a vLLM engine is in, and every call vLLM 0.32 would hang on, reject or answer
with garbage in that state (the rules are cited from vLLM's sources in the module docstring)."""

from __future__ import annotations

import pytest

from reasonrl.distributed.engine_residency import EngineResidency, EngineStateError


def test_awake_engine_generates_and_loads():
    r = EngineResidency()
    r.check_generate("generate")
    r.check_load("load_packed")
    assert not r.scheduler_paused


def test_level2_sleep_then_partial_wake_pauses_the_scheduler_and_discards_weights():
    r = EngineResidency()
    r.sleep(2)
    assert r.asleep == {"weights", "kv_cache"} and r.weights_discarded
    with pytest.raises(EngineStateError, match="weights sleep"):
        r.check_load("receive_weights")
    r.wake_up(["weights"])
    r.check_load("receive_weights")  # the sync's loads are legal now
    with pytest.raises(EngineStateError, match="would hang"):
        r.check_generate("prompt_logprobs")  # KV cache asleep: vLLM keeps the scheduler paused
    r.wake_up(["kv_cache"])
    with pytest.raises(EngineStateError, match="uninitialised memory"):
        r.check_generate("generate")  # fully awake, but nothing was loaded since the level-2 sleep
    r.loaded_all()
    r.check_generate("generate")


def test_level1_sleep_keeps_the_weights():
    r = EngineResidency()
    r.sleep(1)
    r.wake_up(None)
    assert not r.weights_discarded
    r.check_generate("generate")


def test_wake_up_of_a_tag_already_awake_is_refused():
    """vLLM's Executor.wake_up returns having woken nothing when one tag asked for is awake."""
    r = EngineResidency()
    r.sleep(2)
    r.wake_up(["weights"])
    with pytest.raises(EngineStateError, match="would wake nothing"):
        r.wake_up(["weights", "kv_cache"])
    assert r.asleep == {"kv_cache"}  # unchanged
    with pytest.raises(EngineStateError, match="unknown tag"):
        r.wake_up(["scheduling_and_more"])


def test_repeated_sleep_and_wake_are_noops_as_in_vllm():
    r = EngineResidency()
    r.wake_up(["weights"])  # "Executor is not sleeping"
    r.sleep(1)
    r.sleep(2)  # "Executor is already sleeping": nothing changes, the weights were kept by level 1
    assert not r.weights_discarded
    with pytest.raises(EngineStateError, match="level 1 or 2"):
        r.sleep(0)

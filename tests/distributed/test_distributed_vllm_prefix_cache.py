"""After a weight sync the engine's prefix cache must be reset, or the sync fails (issue 39 item 8).

vLLM 0.32's ``LLM.reset_prefix_cache()`` returns False while requests hold KV blocks and then keeps the blocks of the
old weights reusable (``v1/core/block_pool.py``). :meth:`VLLMEngine.finish_weight_sync` retries briefly (the
engine core may finish its requests meanwhile) and otherwise raises. A fake ``LLM`` scripts the answers; no vLLM
engine starts."""

from __future__ import annotations

import functools

import pytest

from reasonrl.distributed.engine_residency import EngineResidency
from reasonrl.distributed.vllm_engine import PrefixCacheNotResetError, VLLMEngine


class FakeCore:
    def __init__(self, unfinished: int):
        self.unfinished = unfinished

    def get_num_unfinished_requests(self) -> int:
        return self.unfinished

    def has_unfinished_requests(self) -> bool:
        return self.unfinished > 0


class FakeLLM:
    """``reset_prefix_cache`` answers from ``answers`` in turn (the last one repeats)."""

    def __init__(self, answers, unfinished: int = 0):
        self.answers = list(answers)
        self.resets = 0
        self.llm_engine = FakeCore(unfinished)

    def reset_prefix_cache(self) -> bool:
        self.resets += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def collective_rpc(self, method, args=()):
        assert method == "reasonrl_finish_sync"
        return [{"received": ["w"]}]


def fake_engine(llm: FakeLLM) -> VLLMEngine:
    engine = object.__new__(VLLMEngine)  # no vLLM: only what finish_weight_sync touches
    engine.llm, engine.residency, engine._pumped = llm, EngineResidency(), {}
    return engine


def test_a_reset_that_succeeds_at_once_is_not_retried():
    llm = FakeLLM([True])
    fake_engine(llm).finish_weight_sync(["w"])
    assert llm.resets == 1


def test_a_refused_reset_is_retried_until_the_engine_is_idle():
    """The engine core finishes its last requests meanwhile: the third attempt resets."""
    llm = FakeLLM([False, False, True])
    (report,) = fake_engine(llm).finish_weight_sync(["w"])
    assert llm.resets == 3 and report == {"received": ["w"]}


def test_a_reset_refused_until_the_deadline_fails_the_sync_naming_the_running_requests():
    llm = FakeLLM([False], unfinished=3)
    engine = fake_engine(llm)
    engine._pumped = {"reasonrl-7": ("turn", False)}
    with pytest.raises(PrefixCacheNotResetError, match=r"3 request\(s\) still in the engine.*1 of them pump\(\)'s"):
        engine.reset_prefix_cache(wait_s=0.2)
    assert llm.resets >= 2  # retried, not given up at the first refusal


def test_the_sync_itself_fails_and_never_continues_with_the_old_blocks():
    """After a level-2 sleep, a sync whose reset failed does not count as loaded: the engine still refuses to
    generate."""
    engine = fake_engine(FakeLLM([False], unfinished=1))
    engine.residency.weights_discarded = True
    engine.reset_prefix_cache = functools.partial(VLLMEngine.reset_prefix_cache, engine, wait_s=0.1)
    with pytest.raises(PrefixCacheNotResetError, match="computed with the old weights"):
        engine.finish_weight_sync(["w"])
    assert engine.residency.weights_discarded

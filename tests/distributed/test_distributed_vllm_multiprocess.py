"""The GPU engine path on CPU: vLLM's multiprocess engine (``VLLM_ENABLE_V1_MULTIPROCESSING=1``, the GPU default).

CPU runs use the in-process engine (``platform.runtime_env_vars``); on GPU placements the engine core and its worker
are separate processes, where ``collective_rpc`` cannot carry tensors (msgpack), so ``VLLMEngine.load_packed`` sends
each bucket as the raw bytes of its flat buffers to a function that runs in the worker. This test starts one engine
actor in that mode (the test session's Ray cluster) and checks generation and a bucketed weight sync against
transformers, by both transports; the last test shuts it down and finds none of its processes or /dev/shm ring
buffers left (the leak-prone mode: an engine core and a worker process per engine).

vLLM vs transformers at 1e-4 (the weight sync's float32 tolerance): separate implementations of the same float32
model (vLLM's CPU kernels are picked from the CPU's flags); measured 9.5e-7, while the sync moves the probe by 1.7.
"""

from __future__ import annotations

import time

import psutil
import pytest
import ray
import torch
from engine_weights import load_weights
from fixtures.own_processes import own_new_shm, own_pids, shm_entries
from transformers import AutoModelForCausalLM

from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
from reasonrl.distributed.weight_sync import plan_buckets

pytestmark = pytest.mark.integration


def hf_prompt_logprobs(model, ids: list[int]) -> torch.Tensor:
    """log p(token_t | token_<t), t = 1..len-1 (teacher forcing), as ``VLLMEngine.prompt_logprobs``."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]


def vllm_process_pids() -> set[int]:
    """vLLM's engine-core and worker processes (named ``VLLM::...``) that this test process started (not another
    pytest-xdist worker's)."""
    own = own_pids()
    return {p.pid for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("VLLM")} & own


@pytest.fixture(scope="module")
def before_engine() -> tuple[set[str], set[int]]:
    """/dev/shm entries and vLLM processes before the module's engine starts."""
    return shm_entries(), vllm_process_pids()


@pytest.fixture(scope="module")
def mp_engine(ray_cluster, tiny_model_dir, before_engine):
    (engine,) = create_vllm_engines(
        1,
        str(tiny_model_dir),
        env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        dtype="float32",
        max_model_len=256,
    )
    ray.get(engine.ready.remote(), timeout=300)
    assert vllm_process_pids() - before_engine[1], "multiprocess mode started no VLLM process"
    yield engine
    try:  # the last test shuts it down itself
        ray.get(engine.shutdown.remote(), timeout=120)  # multiprocess mode owns /dev/shm ring buffers: free them
    except ray.exceptions.RayActorError:
        pass
    ray.kill(engine)


def test_multiprocess_engine_generates_and_takes_a_bucketed_weight_sync(mp_engine, tiny_model_dir, tiny_tokenizer):
    assert ray.get(mp_engine.__ray_call__.remote(lambda engine: engine.in_process)) is False

    prompt = tiny_tokenizer("Compute 12 + 30, step by step.").input_ids
    (greedy,) = ray.get(mp_engine.generate.remote([prompt], SamplingConfig(temperature=0.0, max_tokens=12)))
    assert 0 < len(greedy.token_ids) <= 12 and greedy.prompt_token_ids == prompt
    probe = prompt + greedy.token_ids

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    before = torch.tensor(ray.get(mp_engine.prompt_logprobs.remote(probe)))
    assert (before - hf_prompt_logprobs(model, probe)).abs().max() < 1e-4

    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    state = {name: p.detach() for name, p in model.named_parameters()}
    buckets = plan_buckets(((n, t.numel() * t.element_size()) for n, t in state.items()), 64 * 1024)
    assert len(buckets) > 1
    loaded = sum(load_weights(mp_engine, [(n, state[n]) for n in bucket]) for bucket in buckets)
    assert loaded == len(state)

    after = torch.tensor(ray.get(mp_engine.prompt_logprobs.remote(probe)))
    expected = hf_prompt_logprobs(model, probe)
    err, moved = (after - expected).abs().max(), (after - before).abs().max()
    print(f"multiprocess sync: max |vLLM - HF| = {err:.2e}, the probe moved by {moved:.3f}")
    assert moved > 1e-2  # the weights really changed in the worker process
    assert err < 1e-4  # ... to exactly the trainer's


def test_broadcast_transport_reaches_the_worker_process(mp_engine, tiny_model_dir, tiny_tokenizer):
    """The scale transport on the GPU engine layout: this process is rank 0 of a gloo group with the engine's worker
    process (joined through the worker extension); buckets go by broadcast, the worker reloads them in place."""
    from reasonrl.distributed import sync_group, weight_digest
    from reasonrl.distributed.workers import free_port

    probe = tiny_tokenizer("Compute 40 + 2, step by step. The answer is").input_ids
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    before = torch.tensor(ray.get(mp_engine.prompt_logprobs.remote(probe)))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    state = {name: p.detach() for name, p in model.named_parameters()}

    address, port = ray.util.get_node_ip_address(), free_port()
    joined = mp_engine.join_weight_group.remote(address, port, 1, 2, "gloo")
    group = sync_group.create_group(address, port, 0, 2, "gloo", timeout_s=120)
    assert ray.get(joined) == 1
    buckets = plan_buckets(((n, t.numel() * t.element_size()) for n, t in state.items()), 64 * 1024)
    layouts = [sync_group.bucket_layout([(n, state[n]) for n in bucket]) for bucket in buckets]
    loads = []
    for k, bucket in enumerate(buckets):  # each bucket's receive is posted while the one before loads
        following = layouts[k + 1] if k + 1 < len(layouts) else None
        loads.append(mp_engine.receive_weights.remote(layouts[k], following))
        for buffer in sync_group.pack([(n, state[n]) for n in bucket]):
            sync_group.broadcast(group, buffer)
    assert sum(ray.get(loads)) == len(state)
    (report,) = ray.get(mp_engine.finish_weight_sync.remote(list(state)))  # one worker process
    assert report["received"] == weight_digest.named_fingerprints(state.items())  # bit-exact, in the worker
    assert report["params_checked"] > 0 and report["param_mismatches"] == []

    after = torch.tensor(ray.get(mp_engine.prompt_logprobs.remote(probe)))
    err, moved = (after - hf_prompt_logprobs(model, probe)).abs().max(), (after - before).abs().max()
    print(f"broadcast sync in {len(buckets)} buckets: max |vLLM - HF| = {err:.2e}, the probe moved by {moved:.3f}")
    assert moved > 1e-2 and err < 1e-4


def test_shutdown_leaves_no_engine_process_and_no_shared_memory(mp_engine, before_engine):
    """``VLLMEngine.shutdown`` then killing the actor: the engine core and worker processes end and their /dev/shm
    ring buffers are freed (within 30 s, the time to reap them). The Ray side of a clean exit is checked by the
    uninterrupted run of tests/test_exp_stop_restart.py (no process of the run outlives it, nothing in /dev/shm)."""
    shm_before, vllm_before = before_engine
    ray.get(mp_engine.shutdown.remote(), timeout=120)
    ray.kill(mp_engine)
    deadline = time.monotonic() + 30
    while True:
        left, leaked = vllm_process_pids() - vllm_before, own_new_shm(shm_before)
        if (not left and not leaked) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"vLLM processes still running after shutdown: {sorted(left)}"
    assert not leaked, f"/dev/shm entries left behind: {leaked}"

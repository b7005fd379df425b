"""The ``ipc`` transport's handles (issue 39 item 5): a vLLM worker opens the buffers shared from its own GPU, found by
UUID, on its own device, and refuses a mismatch naming both GPUs. The GPUs are a fake device table (index -> UUID):
what is tested is the mapping, which needs no CUDA; the shared-memory path runs for real."""

from __future__ import annotations

import pickle

import pytest
import torch

from reasonrl.distributed.shared_buffers import CUDA_DEVICE_ARG, BufferExporter, open_buffer, pick_handles

# this vLLM worker process sees two GPUs: its device index -> the GPU's UUID
DEVICES = {0: "GPU-aaaa", 1: "GPU-bbbb"}.__getitem__
REBUILT: list[list] = []


def fake_rebuild(*args):
    """Stands in for torch's ``rebuild_cuda_tensor``: records the arguments it was called with."""
    REBUILT.append(list(args))
    return torch.zeros(int(args[2]))


def cuda_handle(uuid: str, numel: int = 4):
    args = [None] * 8
    args[2], args[CUDA_DEVICE_ARG] = numel, 5  # the producer's own device index: meaningless in the consumer
    return ("cuda", "float32", numel, "", pickle.dumps((fake_rebuild, tuple(args))), uuid)


def test_each_worker_opens_the_handles_made_on_its_own_gpu_whatever_the_rank_order():
    # policy rank 0 shared from GPU-bbbb, rank 1 from GPU-aaaa: the bundle order is not the workers' device order
    per_rank = [[cuda_handle("GPU-bbbb"), cuda_handle("GPU-bbbb")], [cuda_handle("GPU-aaaa"), cuda_handle("GPU-aaaa")]]
    assert pick_handles(per_rank, worker_rank=0, device_index=0, uuid_of=DEVICES) is per_rank[1]
    assert pick_handles(per_rank, worker_rank=1, device_index=1, uuid_of=DEVICES) is per_rank[0]


def test_a_worker_whose_gpu_shared_nothing_is_refused_naming_both():
    per_rank = [[cuda_handle("GPU-bbbb")]]
    with pytest.raises(ValueError, match=r"cuda:0 \(GPU GPU-aaaa\).*producers: GPU-bbbb"):
        pick_handles(per_rank, worker_rank=0, device_index=0, uuid_of=DEVICES)
    with pytest.raises(ValueError, match=r"shared from GPU GPU-bbbb cannot be opened as cuda:0, which is GPU GPU-aaaa"):
        open_buffer(cuda_handle("GPU-bbbb"), 0, uuid_of=DEVICES)
    with pytest.raises(ValueError, match="consumer's device"):
        open_buffer(cuda_handle("GPU-aaaa"))


def test_a_cuda_buffer_is_rebuilt_on_the_workers_device_not_the_current_one():
    REBUILT.clear()
    tensor, close = open_buffer(cuda_handle("GPU-bbbb", numel=3), 1, uuid_of=DEVICES)
    assert REBUILT[0][CUDA_DEVICE_ARG] == 1 and tensor.numel() == 3  # the worker's device index, the producer's 5 gone
    close()


def test_shared_memory_handles_go_by_worker_rank():
    """(Opening them runs in the engine's worker process: test_policy_update_then_weight_sync, transport ipc.)"""
    exporter = BufferExporter()
    buffers = [torch.arange(6, dtype=torch.float32), torch.arange(4, dtype=torch.bfloat16)]
    try:
        per_rank = [[exporter.share(b) for b in buffers], [exporter.share(b * 2) for b in buffers]]
        assert all(h[0] == "shm" and h[5] == "" for handles in per_rank for h in handles)
        assert pick_handles(per_rank, worker_rank=1, device_index=None) is per_rank[1]
    finally:
        assert exporter.release() == 4

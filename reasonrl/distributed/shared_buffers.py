"""Hand a bucket's flat buffers to another process on the same node without copying them through a third party.

The ``ipc`` weight-sync transport under ``colocate_all``: a policy rank and the vLLM worker on its device share the
bucket's memory instead of sending it. One protocol, two kinds of memory:

* ``cuda``: CUDA IPC. The producer exports each flat GPU buffer with torch's own reduction
  (``torch.multiprocessing.reductions.reduce_tensor``: a handle to the allocation) and the UUID of its GPU. The
  consumer (a vLLM worker) picks, among the handles of the policy ranks on its engine's devices, the one made on
  its own GPU by UUID (:func:`pick_handles`), and opens it on its own device, the worker's ``self.device``
  (``rebuild_cuda_tensor`` with the device index replaced: Ray gives every actor its own ``CUDA_VISIBLE_DEVICES``,
  so the producer's index means nothing there, and the current device of a vLLM worker is not guaranteed to be
  its device; vLLM's own IPC receiver does the same, ``distributed/weight_transfer/ipc_engine.py``). A handle
  whose UUID is not the consumer's GPU is refused, naming both. Device to device, no host copy.
* ``shm``: POSIX shared memory (``multiprocessing.shared_memory``), the CPU equivalent that the CPU tests run: the
  producer copies the buffer into a named segment once, the consumer maps it without copying.

A handle is a plain tuple ``(kind, dtype, numel, name, blob, gpu_uuid)`` that vLLM's ``collective_rpc`` can carry
in either engine mode (``gpu_uuid`` empty for shared memory). ``blob`` is torch's CUDA reduction, pickled by the
trainer's own process: never untrusted input. Lifetimes: the producer keeps every buffer it shared alive until
:meth:`BufferExporter.release` (after every consumer has loaded the bucket), and unlinks its shared-memory segments
there; consumers close their mappings as soon as the bucket is loaded (:func:`open_buffer` returns the closer).
"""

from __future__ import annotations

import contextlib
import gc
import pickle
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker, shared_memory

import torch

# (kind, dtype name, numel, shared-memory name, CUDA reduction blob, producer's GPU UUID)
Handle = tuple[str, str, int, str, bytes, str]
CUDA_DEVICE_ARG = 6  # position of the device index in rebuild_cuda_tensor's arguments (torch 2.x reductions)


def gpu_uuid(index: int) -> str:
    """The UUID of the GPU that is CUDA device ``index`` of this process (stable across processes, whatever
    ``CUDA_VISIBLE_DEVICES`` each has)."""
    return str(torch.cuda.get_device_properties(index).uuid)


class BufferExporter:
    """The producer's side: shares buffers and keeps them alive until :meth:`release`."""

    def __init__(self):
        self._tensors: list[torch.Tensor] = []
        self._segments: list[shared_memory.SharedMemory] = []

    def share(self, buffer: torch.Tensor) -> Handle:
        """A handle to ``buffer`` (1-D, contiguous) that a process on this node can open."""
        dtype = str(buffer.dtype).removeprefix("torch.")
        if buffer.is_cuda:
            from torch.multiprocessing.reductions import reduce_tensor

            self._tensors.append(buffer)
            uuid = gpu_uuid(buffer.device.index)
            return ("cuda", dtype, buffer.numel(), "", pickle.dumps(reduce_tensor(buffer)), uuid)
        nbytes = buffer.numel() * buffer.element_size()
        segment = shared_memory.SharedMemory(create=True, size=max(nbytes, 1))
        self._segments.append(segment)
        view = torch.frombuffer(segment.buf, dtype=buffer.dtype, count=buffer.numel())
        view.copy_(buffer.reshape(-1))
        del view  # no exported pointer may outlive the segment's close
        return ("shm", dtype, buffer.numel(), segment.name, b"", "")

    def release(self) -> int:
        """Drop every shared buffer (unlinks the shared-memory segments). Returns how many were released."""
        count = len(self._tensors) + len(self._segments)
        self._tensors.clear()
        for segment in self._segments:
            segment.close()
            segment.unlink()
        self._segments.clear()
        return count


def pick_handles(
    handles_per_rank: Sequence[Sequence[Handle]],
    worker_rank: int,
    device_index: int | None,
    uuid_of: Callable[[int], str] = gpu_uuid,
) -> Sequence[Handle]:
    """The handles (one per dtype buffer) a vLLM worker opens, among those of the policy ranks on its engine's
    devices (``handles_per_rank[i]``: rank ``i``'s): CUDA ones by the UUID of the worker's own GPU (``device_index``:
    the worker's device, ``uuid_of``: index -> UUID), shared memory by the worker's rank. Raises ``ValueError`` when
    no rank shared its buffers from the worker's GPU, naming the worker's GPU and the producers'."""
    if not handles_per_rank or not handles_per_rank[0] or handles_per_rank[0][0][0] != "cuda":
        return handles_per_rank[worker_rank]
    if device_index is None:
        raise ValueError("CUDA IPC handles need the consumer's device (the vLLM worker's self.device)")
    mine = uuid_of(device_index)
    for handles in handles_per_rank:
        if all(h[5] == mine for h in handles):
            return handles
    producers = sorted({h[5] for handles in handles_per_rank for h in handles})
    raise ValueError(
        f"ipc weight sync: vLLM worker {worker_rank} runs on cuda:{device_index} (GPU {mine}), but no policy rank "
        f"shared its bucket from that GPU (producers: {', '.join(producers)}). The engine's workers and the "
        "policy ranks are not on the same GPUs: use colocate_all with the policy on every engine device, or "
        "sync_transport=broadcast"
    )


def open_buffer(
    handle: Handle, device_index: int | None = None, uuid_of: Callable[[int], str] = gpu_uuid
) -> tuple[torch.Tensor, Callable[[], None]]:
    """The consumer's side: a tensor over the shared memory of ``handle`` (no copy) and a function that closes the
    mapping (call it once nothing uses the tensor any more). CUDA: opened on ``device_index`` (the worker's own
    device), which must be the GPU the producer shared it from (else ``ValueError``, naming both)."""
    kind, dtype, numel, name, blob, producer = handle
    if kind == "cuda":
        if device_index is None:
            raise ValueError("a CUDA IPC handle needs the consumer's device (the vLLM worker's self.device)")
        mine = uuid_of(device_index)
        if mine != producer:
            raise ValueError(
                f"ipc weight sync: a buffer shared from GPU {producer} cannot be opened as cuda:{device_index}, "
                f"which is GPU {mine}"
            )
        rebuild, args = pickle.loads(blob)  # the trainer's own reduction of its buffer (module docstring)
        args = list(args)
        args[CUDA_DEVICE_ARG] = device_index
        return rebuild(*args), _noop
    if kind != "shm":
        raise ValueError(f"unknown shared-buffer kind {kind!r}")
    segment = shared_memory.SharedMemory(name=name)
    # Python 3.11 registers every opened segment with its resource tracker, which would unlink it when this process
    # exits; the producer owns it.
    resource_tracker.unregister(segment._name, "shared_memory")  # noqa: SLF001 (no public way before 3.13)
    tensor = torch.frombuffer(segment.buf, dtype=getattr(torch, dtype), count=numel)

    def close() -> None:
        try:
            segment.close()
        except BufferError:  # a view still alive somewhere: collect it, else leave the mapping to process exit
            gc.collect()
            with contextlib.suppress(BufferError):
                segment.close()

    return tensor, close


def _noop() -> None:
    return None

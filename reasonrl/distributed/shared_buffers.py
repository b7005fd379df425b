"""Hand a bucket's flat buffers to another process on the same node without copying them through a third party.

The ``ipc`` weight-sync transport under ``colocate_all``: a policy rank and the vLLM worker on its device share the
bucket's memory instead of sending it. One protocol, two kinds of memory:

* ``cuda``: CUDA IPC. The producer exports each flat GPU buffer with torch's own reduction
  (``torch.multiprocessing.reductions.reduce_tensor``: a handle to the allocation); the consumer opens it on its
  current device (``rebuild_cuda_tensor``, with the device index replaced by the consumer's: Ray gives every actor
  its own ``CUDA_VISIBLE_DEVICES``, so the producer's index means nothing there). Device to device, no host copy.
* ``shm``: POSIX shared memory (``multiprocessing.shared_memory``), the CPU equivalent that the CPU tests run: the
  producer copies the buffer into a named segment once, the consumer maps it without copying.

A handle is a plain tuple ``(kind, dtype, numel, name, blob)`` that vLLM's ``collective_rpc`` can carry in either
engine mode. ``blob`` is torch's CUDA reduction, pickled by the trainer's own process: never untrusted input.
Lifetimes: the producer keeps every buffer it shared alive until :meth:`BufferExporter.release` (after every
consumer has loaded the bucket), and unlinks its shared-memory segments there; consumers close their mappings
as soon as the bucket is loaded (:func:`open_buffer` returns the closer).
"""

from __future__ import annotations

import contextlib
import gc
import pickle
from collections.abc import Callable
from multiprocessing import resource_tracker, shared_memory

import torch

Handle = tuple[str, str, int, str, bytes]  # (kind, dtype name, numel, shared-memory name, CUDA reduction blob)
CUDA_DEVICE_ARG = 6  # position of the device index in rebuild_cuda_tensor's arguments (torch 2.x reductions)


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
            return ("cuda", dtype, buffer.numel(), "", pickle.dumps(reduce_tensor(buffer)))
        nbytes = buffer.numel() * buffer.element_size()
        segment = shared_memory.SharedMemory(create=True, size=max(nbytes, 1))
        self._segments.append(segment)
        view = torch.frombuffer(segment.buf, dtype=buffer.dtype, count=buffer.numel())
        view.copy_(buffer.reshape(-1))
        del view  # no exported pointer may outlive the segment's close
        return ("shm", dtype, buffer.numel(), segment.name, b"")

    def release(self) -> int:
        """Drop every shared buffer (unlinks the shared-memory segments). Returns how many were released."""
        count = len(self._tensors) + len(self._segments)
        self._tensors.clear()
        for segment in self._segments:
            segment.close()
            segment.unlink()
        self._segments.clear()
        return count


def open_buffer(handle: Handle) -> tuple[torch.Tensor, Callable[[], None]]:
    """The consumer's side: a tensor over the shared memory of ``handle`` (no copy) and a function that closes the
    mapping (call it once nothing uses the tensor any more)."""
    kind, dtype, numel, name, blob = handle
    if kind == "cuda":
        rebuild, args = pickle.loads(blob)  # the trainer's own reduction of its buffer (module docstring)
        args = list(args)
        args[CUDA_DEVICE_ARG] = torch.cuda.current_device()
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

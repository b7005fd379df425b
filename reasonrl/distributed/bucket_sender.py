"""The policy ranks' part of the weight sync (``weight_sync``): gather a bucket to rank 0, send it over the chosen
transport, keep what the ``sent_weights`` probe scores. Runs inside ``PolicyWorker`` (one per rank); it never calls an
engine: the driver (``weight_sync.WeightSyncer``) tells the engines what to receive.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence
from typing import Any

from reasonrl.distributed import sync_group
from reasonrl.distributed.reload_units import module_units
from reasonrl.distributed.shared_buffers import BufferExporter
from reasonrl.distributed.weight_digest import named_fingerprints


def timed(fn: Callable, *args, **kwargs):
    """``(result, seconds)`` of one call."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


class KeepSent(enum.Enum):
    """What policy rank 0 keeps of the tensors it sends, for the ``sent_weights`` probe (:meth:`BucketSender.send`)."""

    NONE = "none"  # keep no copy (and drop any copy an earlier sync left)
    NEW = "new"  # the first bucket of a sync that probes: drop the earlier copy, keep this bucket
    ADD = "add"  # a later bucket of that sync: add it to the copy


class BucketSender:
    """The policy ranks' part of a sync (one per rank, called through ``PolicyWorker``): gather a bucket to rank 0,
    which sends it over the chosen transport and keeps it for the probe. It never calls an engine: the driver
    (:class:`WeightSyncer`) tells the engines what to receive.
    """

    def __init__(self, module, rank: int, backend: str):
        from reasonrl.models.lora import is_adapted, merge_plan

        self.module = module
        self.rank = rank
        self.backend = backend  # the policy group's: gloo (CPU) or nccl (GPU)
        self.group = None  # the weight-broadcast group (rank 0 only)
        self.sent: dict[str, Any] = {}  # rank 0: the tensors of this sync, for the sent_weights probe
        self.exporter = BufferExporter()  # ipc: the buffers shared with the engine workers on this rank's device
        # rank 0, syncs of the trainable parameters only (a frozen vision tower): the frozen tensors as the first,
        # full sync sent them, so that the sent_weights probe model is whole (they never change)
        self.frozen: dict[str, Any] = {}
        # LoRA: the engines get the base model's names, each adapted weight merged (W + s*B@A) per bucket
        self.merge = merge_plan(module) if is_adapted(module) else None
        frozen = {n for n, p in module.named_parameters() if not p.requires_grad}
        self.frozen_names = frozen if self.merge is None else set()  # (LoRA: every base weight is frozen, all sent)

    def layout(self, trainable_only: bool = False) -> list[tuple[str, tuple[int, ...], str, str]]:
        """``(name, full shape, dtype, unit)`` of every parameter in ``named_parameters()`` order (ZeRO-3: the full
        shape, not the partition's); with LoRA, of the base model's parameters (what the engines hold). ``unit``:
        what a bucket must never split (``reload_units.module_units`` of this model's module tree).
        ``trainable_only``: the parameters that train (``requires_grad``; not with LoRA, whose merged weights are
        base parameters)."""
        from reasonrl.models.lora import base_name

        params = dict(self.module.named_parameters())
        units = module_units(self.module)
        names = {n: n for n in params} if self.merge is None else {n: e.source for n, e in self.merge.items()}
        if trainable_only:
            if self.merge is not None:
                raise ValueError("layout(trainable_only=True): not with LoRA (the merged weights are base weights)")
            names = {n: src for n, src in names.items() if params[src].requires_grad}
        return [
            (
                name,
                tuple(getattr(params[src], "ds_shape", params[src].shape)),
                str(params[src].dtype).removeprefix("torch."),
                units[src] if self.merge is None else base_name(units[src]),
            )
            for name, src in names.items()
        ]

    def join(self, address: str, port: int, world_size: int, timeout_s: float) -> None:
        """Rank 0 joins the weight-broadcast group as its root (with every engine worker)."""

        self.group = sync_group.create_group(address, port, 0, world_size, self.backend, timeout_s)

    def send(self, names: Sequence[str], transport: str, keep: KeepSent, share_ranks: int = 1) -> dict[str, Any] | None:
        """Gather the bucket ``names`` (collective) and send it. Returns, on rank 0, ``gather_s``, ``send_s``,
        ``digests`` (the ``weight_digest`` fingerprint of each tensor sent) and for the object store ``ref``: a
        one-element list holding the ``ObjectRef`` of the bucket's flat buffers (in a list, so that Ray hands the
        driver the ref rather than the value). ``ipc``: ranks ``< share_ranks`` (one per engine worker, on its
        device) each gather the whole bucket and return ``handles`` to its flat buffers (``shared_buffers``), kept
        alive until :meth:`release_shared`. ``keep``: what rank 0 keeps of the tensors for :meth:`sent_logprobs`
        (:class:`KeepSent`)."""
        from reasonrl.distributed import deepspeed_engine as ds

        if keep is not KeepSent.ADD:
            self.sent = {}
        if transport == "ipc":  # the driver asks for bucket k+1 once every engine has loaded bucket k
            self.exporter.release()
        sharing = transport == "ipc" and self.rank < share_ranks
        on_device = (transport == "broadcast" and self.backend == "nccl") or (sharing and self.backend == "nccl")
        device = next(self.module.parameters()).device if on_device else "cpu"
        rank0_only = not (transport == "ipc" and share_ranks > 1)  # ipc: every sharing rank needs the full bucket
        sources = list(names) if self.merge is None else [s for n in names for s in self.merge[n].sources]
        tensors, gather_s = timed(ds.gather_params, self.module, sources, rank0_only=rank0_only, device=device)
        if self.rank != 0 and not sharing:
            return None
        if self.merge is not None:  # the bucket's adapted weights merged; the trainer's W is never changed
            from reasonrl.models.lora import merged_tensors

            tensors = merged_tensors(self.merge, names, tensors)
        named = list(tensors.items())
        start = time.perf_counter()
        ref = handles = None
        if transport == "broadcast":
            if self.group is None:
                raise RuntimeError("send_bucket(broadcast) before join_weight_group")
            for buffer in sync_group.pack(named):
                sync_group.broadcast(self.group, buffer)
        elif transport == "ipc":
            handles = [self.exporter.share(buffer) for buffer in sync_group.pack(named)]
        else:
            import ray

            # the flat buffers, never the tensors: pickling a view serialises its whole storage, so each view of
            # the gathered bucket would carry the entire bucket
            ref = [ray.put(sync_group.pack(named))]
        # what the engines must receive and load; after the send, so the engines load while rank 0 fingerprints
        digests = named_fingerprints(named) if self.rank == 0 else {}
        if keep is not KeepSent.NONE and self.rank == 0:
            self.sent |= {n: t.cpu() for n, t in named}
        if self.rank == 0 and self.frozen_names:  # frozen parameters as sent (kept for syncs that skip them)
            self.frozen |= {n: t.cpu() for n, t in named if n in self.frozen_names}
        return {
            "gather_s": gather_s,
            "send_s": time.perf_counter() - start,
            "ref": ref,
            "handles": handles,
            "digests": digests,
        }

    def release_shared(self) -> int:
        """``ipc``: drop the buffers shared for the engines (they have loaded them). Returns how many."""
        return self.exporter.release()

    def sent_logprobs(self, probe_ids: Sequence[int], images=None, vision=None) -> list[float] | None:
        """Rank 0: the probe's log-probs under the weights this sync sent, from a host model assembled on those
        tensors (no second gather); frees them. None on other ranks. ``images``: a VLM probe's pictures, turned into
        the model's pixel inputs by ``vision`` (the worker's ``models.vision.VisionInputs``)."""
        from reasonrl.distributed import deepspeed_engine as ds
        from reasonrl.models.host_copy import model_from_tensors, sequence_logprobs

        if self.rank != 0:
            return None
        if not self.sent:
            raise RuntimeError("sent_probe_logprobs: this sync kept no weights (send_bucket with KeepSent.NEW first)")
        from reasonrl.models.lora import base_name

        base = self.module.get_base_model() if self.merge is not None else self.module
        buffers = {base_name(n): b.detach().cpu() for n, b in self.module.named_buffers()}  # never partitioned
        with ds.no_zero3_init():  # (a sync of the trainable parameters only: the frozen ones as first sent)
            model = model_from_tensors(base.config, self.frozen | self.sent, buffers, attn_implementation="sdpa")
        self.sent = {}
        pixel_inputs = None
        if images:
            import torch

            if vision is None:
                raise ValueError("sent_logprobs: a probe with pictures needs the policy's vision inputs (a VLM)")
            pixel_inputs = vision([list(images)], torch.tensor([list(probe_ids)]))
        return sequence_logprobs(model, list(probe_ids), pixel_inputs)

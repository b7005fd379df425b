"""The weight-broadcast group's wire format and transport choice (pure), and one broadcast between two processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import pytest
import torch

from reasonrl.distributed import sync_group
from reasonrl.distributed.weight_sync import resolve_transport, resolve_verify_source


def test_pack_unpack_round_trip_with_several_dtypes():
    bucket = [
        ("a.weight", torch.randn(3, 4)),
        ("b.weight", torch.randn(5, dtype=torch.float64)),
        ("c.bias", torch.randn(2)),
        ("d.weight", torch.randn(2, 2).t()),  # not contiguous
    ]
    layout = sync_group.bucket_layout(bucket)
    assert layout[1] == ("b.weight", (5,), "float64")
    buffers = sync_group.pack(bucket)
    assert [b.dtype for b in buffers] == [torch.float32, torch.float64]  # one buffer per dtype, first-seen order
    received = sync_group.empty_buffers(layout, "cpu")
    for src, dst in zip(buffers, received, strict=True):
        dst.copy_(src)  # what the broadcast does
    out = sync_group.unpack(layout, received)
    assert [n for n, _ in out] == [n for n, _ in bucket]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(out, bucket, strict=True))


def test_views_of_one_flat_buffer_are_sent_without_a_copy():
    flat = torch.arange(10.0)
    bucket = [("a", flat[:4].view(2, 2)), ("b", flat[4:])]
    (buffer,) = sync_group.pack(bucket)
    assert buffer.data_ptr() == flat.data_ptr() and buffer.numel() == 10
    (partial,) = sync_group.pack([("a", flat[:4]), ("b", flat[4:9])])  # does not cover the storage: copied
    assert partial.data_ptr() != flat.data_ptr() and torch.equal(partial, flat[:9])


def test_object_store_payload_of_gathered_views_is_one_bucket_not_one_per_view():
    """The gather returns views of one flat bucket; pickling each view would serialise the whole bucket each time
    (a 513 MiB SmolLM2 sync once filled 22 GB of RAM that way)."""
    import pickle

    flat = torch.randn(50 * 1000)
    views = [(f"w{i}", flat[i * 1000 : (i + 1) * 1000].view(10, 100)) for i in range(50)]
    assert len(pickle.dumps(views)) > 40 * flat.numel() * 4  # the trap
    layout, buffers = sync_group.bucket_layout(views), sync_group.pack(views)  # what BucketSender puts
    assert len(pickle.dumps((layout, buffers))) < 1.1 * flat.numel() * 4
    out = sync_group.unpack(layout, pickle.loads(pickle.dumps(buffers)))
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(out, views, strict=True))


def test_raw_bytes_round_trip_for_the_multiprocess_engine():
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        buffer = torch.randn(37).to(dtype)
        back = sync_group.from_bytes(sync_group.to_bytes(buffer), str(dtype).removeprefix("torch."))
        assert back.dtype == dtype and torch.equal(back, buffer)
    layout = sync_group.bucket_layout([("a", torch.zeros(2)), ("b", torch.zeros(1, dtype=torch.bfloat16))])
    assert sync_group.buffer_dtypes(layout) == ["float32", "bfloat16"]


def test_unpack_rejects_a_buffer_of_the_wrong_size():
    layout = sync_group.bucket_layout([("a", torch.zeros(3))])
    with pytest.raises(ValueError, match="holds 4 elements, the layout 3"):
        sync_group.unpack(layout, [torch.zeros(4)])


def test_transport_and_verify_source_choices():
    assert resolve_transport("auto", "cpu", colocated=True) == "broadcast"
    assert resolve_transport("auto", "gpu", colocated=False) == "broadcast"
    assert resolve_transport("auto", "gpu", colocated=True) == "ipc"  # NCCL refuses two ranks on one GPU
    assert resolve_transport("object_store", "gpu", colocated=False) == "object_store"
    assert resolve_verify_source("auto", "cpu") == "sent_weights"
    assert resolve_verify_source("auto", "gpu") == "trainer_forward"
    assert resolve_verify_source("trainer_forward", "cpu") == "trainer_forward"
    with pytest.raises(ValueError, match="sync_transport"):
        resolve_transport("nccl", "gpu", colocated=False)
    with pytest.raises(ValueError, match="sync_verify_with"):
        resolve_verify_source("engine", "cpu")


def test_broadcast_between_two_processes_over_gloo(tmp_path):
    """Rank 0 packs a bucket and broadcasts it; rank 1 (another process) receives it into empty buffers."""
    from reasonrl.distributed.workers import free_port

    script = tmp_path / "rank.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, torch
            from reasonrl.distributed import sync_group
            rank, port = int(sys.argv[1]), int(sys.argv[2])
            group = sync_group.create_group("127.0.0.1", port, rank, 2, "gloo", timeout_s=60)
            g = torch.Generator().manual_seed(0)
            bucket = [("w", torch.randn(64, 32, generator=g)), ("h", torch.randn(7, generator=g).half())]
            layout = sync_group.bucket_layout(bucket)
            buffers = sync_group.pack(bucket) if rank == 0 else sync_group.empty_buffers(layout, "cpu")
            for b in buffers:
                sync_group.broadcast(group, b)
            out = sync_group.unpack(layout, buffers)
            print("equal", all(torch.equal(a, b) for (_, a), (_, b) in zip(out, bucket)), flush=True)
            """
        )
    )
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, str(script), str(r), str(port)], stdout=subprocess.PIPE, text=True)
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all("equal True" in out for out in outs), outs


def test_the_next_bucket_is_received_ahead_and_must_be_the_one_asked_for():
    """The engine's receiver posts the next bucket's broadcast before it loads the current one; the next call must
    ask for that bucket (a layout that came through msgpack as lists compares equal), any other is refused."""
    from reasonrl.distributed.vllm_worker_extension import WeightBroadcastReceiver
    from reasonrl.distributed.workers import free_port

    class Receiver(WeightBroadcastReceiver):  # a vLLM worker's part: rank, device, its model, the load recorded
        rank, device = 0, "cpu"

        def __init__(self):
            self.loaded: list[list[str]] = []
            model = torch.nn.Module()  # parameters named as sent, so the exact check's map finds each one
            model.a, model.b = torch.nn.Module(), torch.nn.Module()
            model.a.w, model.a.h = torch.nn.Parameter(torch.zeros(4, 2)), torch.nn.Parameter(torch.zeros(3).half())
            model.b.w = torch.nn.Parameter(torch.zeros(5))
            self.model_runner = types.SimpleNamespace(get_model=lambda: model)

        def _reasonrl_apply(self, named):
            self.loaded.append([name for name, _ in named])

    receiver = Receiver()
    receiver._reasonrl_weight_group = sync_group.create_group("127.0.0.1", free_port(), 0, 1, "gloo", timeout_s=30)
    a = [("a.w", (4, 2), "float32"), ("a.h", (3,), "float16")]
    b = [("b.w", (5,), "float32")]
    receiver.reasonrl_receive_weights(a, next_layout=[[n, list(s), d] for n, s, d in b])
    assert receiver.loaded == [["a.w", "a.h"]] and receiver._reasonrl_posted.key == _key(b)
    receiver.reasonrl_receive_weights(b)
    assert receiver.loaded[-1] == ["b.w"] and not hasattr(receiver, "_reasonrl_posted")
    assert set(receiver._reasonrl_received) == {"a.w", "a.h", "b.w"}

    receiver.reasonrl_receive_weights(a, next_layout=b)
    with pytest.raises(RuntimeError, match="out of order"):
        receiver.reasonrl_receive_weights(a)


def _key(layout):
    from reasonrl.distributed.vllm_worker_extension import _PostedReceive

    return _PostedReceive.key_of(layout)

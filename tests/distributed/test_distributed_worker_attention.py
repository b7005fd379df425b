"""Each DeepSpeed worker resolves ``attn_implementation`` for its own placement (issue 22 item 6), without Ray: the
placement's device comes from ``REASONRL_DEVICE``, as in an actor's runtime env; flash-attn's presence is faked."""

from __future__ import annotations

import pytest

import reasonrl.models
from reasonrl.distributed.platform import DEVICE_ENV_VAR
from reasonrl.distributed.ppo_workers import CriticWorker, PolicyWorker, RewardModelWorker, WorkerConfig
from reasonrl.models import PackedBatch, PaddedBatch

SAMPLES = [([1, 2, 3], [4, 5]), ([6], [7])]


def configured(worker_cls, monkeypatch, *, device: str, flash_error: str | None, **fields):
    monkeypatch.setenv(DEVICE_ENV_VAR, device)
    monkeypatch.setattr(reasonrl.models, "flash_attn_import_error", lambda: flash_error)
    worker = worker_cls(1, 2)
    worker._configure(WorkerConfig(model_path="unused", **fields))
    return worker


def test_auto_on_a_gpu_worker_with_flash_attn_packs_and_passes_cu_seqlens(monkeypatch):
    w = configured(CriticWorker, monkeypatch, device="gpu", flash_error=None, bf16=True, attn_implementation="auto",
                   packing="auto")  # fmt: skip
    assert (w.attn_implementation, w.packing) == ("flash_attention_2", True)
    monkeypatch.setattr(CriticWorker, "device", "cpu")  # no engine here; the layout is what matters
    batch = w._batch(SAMPLES)
    assert isinstance(batch, PackedBatch) and batch.forward_kwargs()["cu_seq_lens_q"].tolist() == [0, 5, 7]
    report = w.attention()
    assert report["requested"] == "auto" and report["attn_implementation"] == "flash_attention_2"
    assert report["packing"] is True and report["device"] == "gpu"


def test_auto_on_a_gpu_worker_without_flash_attn_pads_and_says_why(monkeypatch):
    w = configured(PolicyWorker, monkeypatch, device="gpu", flash_error="not installed", bf16=True,
                   attn_implementation="auto", packing="auto")  # fmt: skip
    assert (w.attn_implementation, w.packing) == ("sdpa", False)
    monkeypatch.setattr(PolicyWorker, "device", "cpu")
    assert isinstance(w._batch(SAMPLES), PaddedBatch)
    assert w.attention()["flash_attn_error"] == "not installed"


def test_auto_on_a_cpu_worker_is_sdpa(monkeypatch):
    w = configured(CriticWorker, monkeypatch, device="cpu", flash_error=None, bf16=True, attn_implementation="auto",
                   packing="auto")  # fmt: skip
    assert (w.attn_implementation, w.packing) == ("sdpa", False)


def test_explicit_flash_attention_fails_on_the_worker_without_flash_attn(monkeypatch):
    with pytest.raises(ValueError, match=r"attn_implementation='flash_attention_2' needs the flash_attn package, which "
                       r"does not import on node \S+ \(PolicyWorker rank 1\) \(no CUDA build\)"):  # fmt: skip
        configured(PolicyWorker, monkeypatch, device="gpu", flash_error="no CUDA build", bf16=True,
                   attn_implementation="flash_attention_2")  # fmt: skip


def test_the_reward_model_reports_padded_rows_even_on_flash_attention(monkeypatch):
    w = configured(RewardModelWorker, monkeypatch, device="gpu", flash_error=None, bf16=True,
                   attn_implementation="auto", packing="auto")  # fmt: skip
    assert w.attention()["attn_implementation"] == "flash_attention_2" and w.attention()["packing"] is False

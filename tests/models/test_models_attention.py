"""The attention backend resolved in the process that runs the model (issue 22 item 6), the packing decided from
it, and the ``cu_seqlens`` kwargs a packed batch gives flash-attention."""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
import types

import pytest
import torch
from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

from reasonrl.models import (
    attention_summary,
    decide_packing,
    flash_attn_import_error,
    pack_batch,
    resolve_attn_implementation,
)


# ------------------------------------------------------------------------------------------------- resolution
@pytest.mark.parametrize(
    ("device", "bf16", "flash"), list(itertools.product(("gpu", "cpu"), (True, False), (True, False)))
)
def test_auto_is_flash_only_on_a_gpu_in_bf16_where_flash_attn_imports(device, bf16, flash):
    expected = "flash_attention_2" if (device, bf16, flash) == ("gpu", True, True) else "sdpa"
    assert resolve_attn_implementation("auto", device, bf16, flash) == expected


@pytest.mark.parametrize("choice", ["sdpa", "eager", "flex_attention"])
@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_an_explicit_choice_is_kept(choice, device):
    assert resolve_attn_implementation(choice, device, bf16=False, flash_available=False) == choice


def test_explicit_flash_attention_runs_where_it_can():
    assert resolve_attn_implementation("flash_attention_2", "gpu", True, True) == "flash_attention_2"


@pytest.mark.parametrize(
    ("device", "bf16", "flash", "problem"),
    [
        (
            "gpu",
            True,
            False,
            r"needs the flash_attn package, which does not import on node 10\.0\.0\.7 \(rank 3\) "
            r"\(the flash_attn package is not installed\)",
        ),
        ("cpu", True, True, r"needs a GPU, and node 10\.0\.0\.7 \(rank 3\) is placed on cpu"),
        ("gpu", False, True, r"runs in bf16/fp16 only, and node 10\.0\.0\.7 \(rank 3\) runs in float32"),
    ],
    ids=["no-flash_attn-on-this-node", "cpu", "fp32"],
)
def test_explicit_flash_attention_fails_where_it_cannot_run_naming_field_and_node(device, bf16, flash, problem):
    with pytest.raises(ValueError, match=r"attn_implementation='flash_attention_2' " + problem) as err:
        resolve_attn_implementation(
            "flash_attention_2",
            device,
            bf16,
            flash,
            where="node 10.0.0.7 (rank 3)",
            flash_error="the flash_attn package is not installed",
        )
    assert "attn_implementation=auto" in str(err.value)  # the way out


def test_flash_attn_import_error_tells_missing_from_broken(monkeypatch):
    flash_attn_import_error.cache_clear()
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert flash_attn_import_error() == "the flash_attn package is not installed"
    flash_attn_import_error.cache_clear()
    # found, but its CUDA extension does not load (built for another torch): not usable either
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # `import flash_attn` raises (ModuleNotFoundError)
    error = flash_attn_import_error()
    assert error is not None and error.startswith("import flash_attn failed: ModuleNotFoundError")
    flash_attn_import_error.cache_clear()
    monkeypatch.setitem(sys.modules, "flash_attn", types.ModuleType("flash_attn"))  # imports: usable
    assert flash_attn_import_error() is None
    flash_attn_import_error.cache_clear()


# ------------------------------------------------------------------------------------------------------ packing
@pytest.mark.parametrize(
    ("mode", "attn", "packs"),
    [
        ("off", "flash_attention_2", False),
        ("auto", "flash_attention_2", True),
        ("auto", "sdpa", False),  # exact but slower: a dense block mask
        ("on", "sdpa", True),
        ("on", "eager", True),
        ("on", "flash_attention_2", True),
        ("on", "paged_attention", False),  # cannot keep the sequences apart
    ],
)
def test_packing_is_decided_from_the_resolved_backend(mode, attn, packs):
    assert decide_packing(mode, attn) is packs


def test_unknown_packing_mode_is_refused():
    with pytest.raises(ValueError, match="packing=True"):
        decide_packing(True, "flash_attention_2")


# -------------------------------------------------------------------------------------------------- reporting
def report(impl, packing, device="gpu", error=None, requested="auto"):
    return dict(requested=requested, attn_implementation=impl, packing=packing, device=device, flash_attn_error=error)


def test_attention_summary_of_agreeing_ranks():
    line = attention_summary("policy", [report("flash_attention_2", True)] * 2)
    assert line == (
        "policy: attention flash_attention_2, packed micro-batches (all ranks on gpu) "
        "[attn_implementation=auto, resolved on each worker]"
    )


def test_attention_summary_says_when_ulysses_splits_the_sequence():
    reports = [dict(report("sdpa", False, device="cpu"), sequence_parallel_ranks=2)] * 2
    assert attention_summary("ref", reports).startswith(
        "ref: attention Ulysses over 2 ranks around sdpa, padded micro-batches (all ranks on cpu)"
    )


def test_attention_summary_names_ranks_that_differ_and_why_auto_gave_no_flash():
    line = attention_summary("critic", [report("flash_attention_2", True), report("sdpa", False, error="not here")])
    assert "flash_attention_2, packed micro-batches (ranks [0] on gpu)" in line
    assert "sdpa, padded micro-batches (ranks [1] on gpu; flash_attn: not here)" in line
    # on a CPU placement flash-attention was never a candidate: no reason given
    cpu = attention_summary("ref", [report("sdpa", False, device="cpu", error="not installed")])
    assert "flash_attn" not in cpu.split("[")[0]


# ---------------------------------------------------------------------------------------- cu_seqlens for flash
def random_samples(rng: random.Random, count: int) -> list[tuple[list[int], list[int]]]:
    return [
        (
            [rng.randrange(3, 100) for _ in range(rng.randint(1, 9))],
            [rng.randrange(3, 100) for _ in range(rng.randint(0, 9))],
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_varlen_kwargs_are_exactly_what_transformers_derives_from_position_ids(seed):
    """transformers' own helper (``prepare_fa_kwargs_from_position_ids``, what every flash layer runs when no
    ``cu_seq_lens`` are given) on the packed row's position ids gives the same cu_seqlens (int32, same device) and
    max length as the kwargs the batch builds on the host."""
    rng = random.Random(seed)
    batch = pack_batch(random_samples(rng, rng.randint(1, 6)), flash_varlen=True)
    kwargs = batch.forward_kwargs()
    (cu_q, cu_k), (max_q, max_k) = prepare_fa_kwargs_from_position_ids(batch.position_ids)
    for ours, theirs in ((kwargs["cu_seq_lens_q"], cu_q), (kwargs["cu_seq_lens_k"], cu_k)):
        assert ours.dtype == theirs.dtype == torch.int32 and ours.device == theirs.device
        assert torch.equal(ours, theirs)
    # Python ints (no device sync to read them), equal to transformers' 0-d tensors
    assert type(kwargs["max_length_q"]) is int and kwargs["max_length_q"] == kwargs["max_length_k"]
    assert kwargs["max_length_q"] == int(max_q) == int(max_k)
    assert set(kwargs) == {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k"}  # FlashAttentionKwargs


def test_varlen_kwargs_only_for_flash_and_kept_by_to():
    samples = [([1, 2, 3], [4, 5]), ([6], [])]
    assert pack_batch(samples).forward_kwargs() == {}  # sdpa/eager: unchanged forward
    moved = pack_batch(samples, flash_varlen=True).to("cpu")
    assert moved.flash_varlen and moved.forward_kwargs()["cu_seq_lens_q"].tolist() == [0, 5, 6]
    assert moved.forward_kwargs()["max_length_q"] == 5

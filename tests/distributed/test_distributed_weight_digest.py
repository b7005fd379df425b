"""weight_digest: exact, order-free fingerprints that compose over concatenation (fused vLLM parameters)."""

from __future__ import annotations

import pytest
import torch

from reasonrl.distributed import weight_digest as wd


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.uint8])
def test_one_changed_element_or_swap_changes_the_fingerprint(dtype):
    g = torch.Generator().manual_seed(0)
    t = (torch.rand(64, 32, generator=g) * 100).to(dtype)
    base = wd.fingerprint(t)
    assert wd.fingerprint(t.clone()) == base
    one = t.clone()
    one[3, 7] = one[3, 7] + 1
    assert wd.fingerprint(one) != base
    swapped = t.clone()
    swapped[[0, 1]] = t[[1, 0]]  # same multiset of values, other positions
    assert not torch.equal(swapped, t) and wd.fingerprint(swapped) != base


def test_a_bf16_rounding_level_change_is_seen():
    """One optimizer step at lr 1e-6 moves a bf16 weight by at most one ulp: still a different fingerprint."""
    t = torch.randn(4096, dtype=torch.bfloat16)
    nudged = t.clone()
    nudged[17] = torch.nextafter(t[17].float(), torch.tensor(10.0)).to(torch.bfloat16)
    if torch.equal(nudged, t):  # the float32 step was below bf16 resolution: take the next bf16 value up
        nudged.view(torch.int16)[17] += 1
    assert wd.fingerprint(nudged) != wd.fingerprint(t)


def _by_definition(t: torch.Tensor) -> wd.Fingerprint:
    """The module docstring's formula, in Python integers."""
    x = t.contiguous().reshape(-1).view(wd._INT_OF_WIDTH[t.element_size()]).tolist()
    return (len(x), sum(x) & wd.MASK, sum((i + 1) * v for i, v in enumerate(x)) & wd.MASK)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.uint8])
@pytest.mark.parametrize("n", [1, 1023, 1024, 3 * 1024 + 5])
def test_fingerprint_is_the_definition_whatever_the_row_and_pass_sizes(dtype, n, monkeypatch):
    """Rows of float64 products, passes of rows and the int64 tail give the formula exactly (int32 extremes too)."""
    g = torch.Generator().manual_seed(n)
    t = (
        torch.randint(0, 255, (n,), generator=g, dtype=torch.uint8)
        if dtype == torch.uint8
        else torch.randn(n).to(dtype)
    )
    assert wd.fingerprint(t) == _by_definition(t)
    monkeypatch.setattr(wd, "_ROWS_PER_PASS", {"cpu": 2})
    assert wd.fingerprint(t) == _by_definition(t)
    extremes = torch.tensor([-(2**31), 2**31 - 1] * 1024, dtype=torch.int32).view(torch.float32)
    assert wd.fingerprint(extremes) == _by_definition(extremes)


def test_compose_equals_the_fingerprint_of_the_concatenation():
    """qkv_proj = cat(q, k, v) by rows: its fingerprint is computed from the sources' alone (with int64 wrap)."""
    q, k, v = torch.randn(8, 4), torch.randn(2, 4), torch.randn(2, 4)
    big = torch.full((3000,), 2.0**30).view(torch.int32).view(torch.float32)  # large ints: the sums wrap
    parts = [q, k, v, big]
    fused = torch.cat([p.reshape(-1) for p in parts])
    assert wd.compose(wd.fingerprint(p) for p in parts) == wd.fingerprint(fused)
    assert wd.compose(wd.fingerprint(p) for p in [k, q, v]) != wd.fingerprint(torch.cat([q, k, v]))


def test_differences_and_fused_sources():
    sent = {"a": (1, 1, 1), "b": (1, 2, 2), "c": (1, 3, 3)}
    got = {"a": (1, 1, 1), "b": (1, 9, 9), "x": (1, 0, 0)}
    assert wd.differences(sent, got) == {"missing": ["c"], "differ": ["b"], "unexpected": ["x"]}
    as_lists = {name: list(fp) for name, fp in sent.items()}  # what a msgpack round trip may return
    assert wd.differences(sent, as_lists) == {"missing": [], "differ": [], "unexpected": []}
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    names = [f"model.layers.0.self_attn.{p}.weight" for p in ("q_proj", "k_proj", "v_proj")] + ["model.norm.weight"]
    assert wd.fused_sources("model.layers.0.self_attn.qkv_proj.weight", packed, names) == names[:3]
    assert wd.fused_sources("model.norm.weight", packed, names) == ["model.norm.weight"]
    assert wd.fused_sources("model.layers.1.self_attn.qkv_proj.weight", packed, names) is None

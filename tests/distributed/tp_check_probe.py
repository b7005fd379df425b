"""One tensor-parallel rank of the exact sync check on vLLM's real parallel layers (run by
``test_distributed_engine_names.py`` as 2 processes over gloo): a module tree laid out like vLLM's Qwen2.5-VL, built
from vLLM's ``QKVParallelLinear``, ``MergedColumnParallelLinear``, ``RowParallelLinear``, ``VocabParallelEmbedding``
and ``ParallelLMHead`` at TP=2, loaded from full HF-named tensors by vLLM's own ``AutoWeightsLoader`` and mappers;
the worker extension's check (``_reasonrl_load`` / ``reasonrl_finish_sync``) runs on it unchanged.

Usage: ``python tp_check_probe.py <rank> <port> <out.json>``."""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace

import torch
from torch import nn


def hf_tensors() -> dict[str, torch.Tensor]:
    """Full tensors with HF Qwen2.5-VL names (the same on every rank: seeded)."""
    g = torch.Generator().manual_seed(0)
    shapes = {
        "model.visual.blocks.0.norm1.weight": (16,),
        "model.visual.blocks.0.norm1.bias": (16,),
        "model.visual.blocks.0.attn.qkv.weight": (48, 16),  # fused in the checkpoint: q, k, v rows
        "model.visual.blocks.0.attn.qkv.bias": (48,),
        "model.visual.blocks.0.attn.proj.weight": (16, 16),
        "model.visual.blocks.0.attn.proj.bias": (16,),
        "model.visual.blocks.0.mlp.gate_proj.weight": (24, 16),
        "model.visual.blocks.0.mlp.gate_proj.bias": (24,),
        "model.visual.blocks.0.mlp.up_proj.weight": (24, 16),
        "model.visual.blocks.0.mlp.up_proj.bias": (24,),
        "model.visual.blocks.0.mlp.down_proj.weight": (16, 24),
        "model.visual.blocks.0.mlp.down_proj.bias": (16,),
        "model.language_model.embed_tokens.weight": (100, 16),  # padded to 128 rows, 64 per rank
        "model.language_model.layers.0.self_attn.q_proj.weight": (16, 16),  # 4 heads of 4
        "model.language_model.layers.0.self_attn.q_proj.bias": (16,),
        "model.language_model.layers.0.self_attn.k_proj.weight": (4, 16),  # one kv head: replicated on both ranks
        "model.language_model.layers.0.self_attn.k_proj.bias": (4,),
        "model.language_model.layers.0.self_attn.v_proj.weight": (4, 16),
        "model.language_model.layers.0.self_attn.v_proj.bias": (4,),
        "model.language_model.layers.0.self_attn.o_proj.weight": (16, 16),
        "model.language_model.layers.0.mlp.gate_proj.weight": (32, 16),
        "model.language_model.layers.0.mlp.up_proj.weight": (32, 16),
        "model.language_model.layers.0.mlp.down_proj.weight": (16, 32),
        "lm_head.weight": (100, 16),
    }
    return {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}


def build_model():
    """vLLM's layers under the module names of vLLM's Qwen2.5-VL, each level loading as vLLM's classes do."""
    from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
    from vllm.model_executor.models.utils import AutoWeightsLoader, WeightsMapper

    from reasonrl.distributed.engine_names import FALLBACK_MAPPERS

    table = FALLBACK_MAPPERS["Qwen2_5_VLForConditionalGeneration"]

    def mapper(t):
        return WeightsMapper(orig_to_new_prefix=dict(t.prefix), orig_to_new_stacked=dict(t.stacked))

    class Loads(nn.Module):
        hf_to_vllm_mapper = None

        def load_weights(self, weights):
            return AutoWeightsLoader(self).load_weights(weights, mapper=self.hf_to_vllm_mapper)

    f32 = dict(params_dtype=torch.float32)
    block = nn.Module()
    block.norm1 = nn.LayerNorm(16)
    block.attn = nn.Module()
    block.attn.qkv = QKVParallelLinear(16, 4, 4, 4, bias=True, **f32)
    block.attn.proj = RowParallelLinear(16, 16, bias=True, **f32)
    block.mlp = nn.Module()
    block.mlp.gate_up_proj = MergedColumnParallelLinear(16, [24, 24], bias=True, **f32)
    block.mlp.down_proj = RowParallelLinear(24, 16, bias=True, **f32)
    visual = type("Qwen2_5_VisionTransformer", (Loads,), {"hf_to_vllm_mapper": mapper(table["visual"])})()
    visual.blocks = nn.ModuleList([block])
    layer = nn.Module()
    layer.self_attn = nn.Module()
    layer.self_attn.qkv_proj = QKVParallelLinear(16, 4, 4, 1, bias=True, **f32)
    layer.self_attn.o_proj = RowParallelLinear(16, 16, bias=False, **f32)
    layer.mlp = nn.Module()
    layer.mlp.gate_up_proj = MergedColumnParallelLinear(16, [32, 32], bias=False, **f32)
    layer.mlp.down_proj = RowParallelLinear(32, 16, bias=False, **f32)
    text = type("Qwen2ForCausalLM", (Loads,), {"hf_to_vllm_mapper": mapper(table["language_model"])})()
    text.model = nn.Module()
    text.model.embed_tokens = VocabParallelEmbedding(100, 16, **f32)
    text.model.layers = nn.ModuleList([layer])
    text.lm_head = ParallelLMHead(100, 16, **f32)
    root = type("Qwen2_5_VLForConditionalGeneration", (Loads,), {"hf_to_vllm_mapper": mapper(table[""])})()
    root.visual, root.language_model = visual, text
    return root


def main(rank: int, port: int, out: str) -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    from reasonrl.distributed.vllm_worker_extension import WeightBroadcastReceiver

    with set_current_vllm_config(VllmConfig()):
        parallel_state.init_distributed_environment(
            world_size=2, rank=rank, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=rank, backend="gloo"
        )
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=2)
        model = build_model()

    class Runner:
        def get_model(self):
            return model

    class Worker(WeightBroadcastReceiver):
        """The worker extension on a stand-in worker whose reload is vLLM's plain loader (no layer-wise reload)."""

        def __init__(self):
            self.rank, self.device, self.model_runner = rank, torch.device("cpu"), Runner()
            self.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(tensor_parallel_size=2))

        def reload_weights(self, weights_iterator, is_checkpoint_format=True):
            model.load_weights(weights_iterator)

    worker, tensors = Worker(), hf_tensors()
    named = list(tensors.items())
    worker._reasonrl_load(named[:12])  # two buckets: the vision block, then the text model
    worker._reasonrl_load(named[12:])
    correct = worker.reasonrl_finish_sync()
    # the other rank's block of gate_up_proj in this worker (what a wrong slice, or a wrong GPU, would leave)
    gate_up = model.visual.blocks[0].mlp.gate_up_proj.weight
    other = 1 - rank
    worker._reasonrl_load(named)
    with torch.no_grad():
        gate_up[:12] = tensors["model.visual.blocks.0.mlp.gate_proj.weight"][other * 12 : other * 12 + 12]
    wrong = worker.reasonrl_finish_sync()
    shapes = {name: list(p.shape) for name, p in model.named_parameters()}
    json.dump({"correct": correct, "wrong": wrong, "shapes": shapes}, open(out, "w"), default=list)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])

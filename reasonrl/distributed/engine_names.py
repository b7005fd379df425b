"""Where each sent (Hugging Face) tensor lands in a vLLM worker: the parameter, and the part of it this worker holds.

The exact weight-sync check must predict every engine parameter from the tensors the trainer sent, under every name
mapping and tensor-parallel size. vLLM 0.32 maps names hierarchically while it loads: a model class, and any of
its submodules that loads its own weights, carries an ``hf_to_vllm_mapper`` (``WeightsMapper``: prefix renames
such as Qwen2.5-VL's ``model.visual.`` -> ``visual.``, and stacked entries such as ``.gate_proj`` ->
``(.gate_up_proj, 0)``) applied to the names relative to that module. :class:`EngineNames` does the same walk over
the live model (``WeightsMapper.apply``, public), and falls back, for the families we ship, on
:data:`FALLBACK_MAPPERS`: the same mappers transcribed from vLLM 0.32's sources (used where a model instance lacks
them), then on the model's ``packed_modules_mapping`` (sibling fusion). A mapping is only accepted if it lands on a
parameter the model has; a wrong one makes the check fail loudly, never pass silently.

Under tensor parallelism a worker holds a slice of each sharded parameter (:func:`pieces`), exactly as vLLM's
weight loaders cut it (``model_executor/layers/linear.py``, ``vocab_parallel_embedding.py``):

* ``ColumnParallelLinear``: dim ``output_dim`` (0) split evenly, rank ``r`` takes block ``r``;
* ``MergedColumnParallelLinear``: per sub-part ``i`` (``output_sizes[i] / tp`` rows of source ``i``, block ``r``),
  the sub-parts stacked in order;
* ``QKVParallelLinear``: q rows of heads ``r * num_heads ...``; k and v of kv head ``r // num_kv_head_replicas``
  (replicated when ``tp`` exceeds the kv heads); a source already fused (Qwen2.5-VL's vision ``qkv``) is split into
  q, k, v first;
* ``RowParallelLinear``: dim ``input_dim`` (1) split evenly; its bias is whole on every rank;
* ``VocabParallelEmbedding`` / ``ParallelLMHead``: rows ``org_vocab_start_index:org_vocab_end_index``, the padding
  rows after them (zero-filled) not predicted;
* anything else (norms, replicated linears, convolutions): whole.

Each piece is a block of rows of the parameter, so its fingerprint composes (``weight_digest.compose``) in row
order. The layer kind is read from the class names in the module's MRO (no vLLM import: this module runs in vLLM's
worker processes and in unit tests alike).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Target:
    """Where one sent tensor loads: vLLM parameter ``param`` of module ``module``; ``shard``: the sub-part of a fused
    parameter (vLLM's shard id: ``"q"``/``"k"``/``"v"`` or ``0``/``1``), None for a whole (or already fused) one."""

    param: str
    module: str
    shard: str | int | None


@dataclass(frozen=True)
class Piece:
    """A block of a worker's parameter predicted from one sent tensor: ``offset`` (elements into the flattened
    parameter), ``cut`` (the full sent tensor -> this worker's block of it, contiguous; None: the whole tensor)
    and ``padded`` (the parameter may hold more elements after its blocks: a vocabulary-parallel table's padding
    rows)."""

    offset: int
    cut: Callable[[torch.Tensor], torch.Tensor] | None = None
    padded: bool = False

    def of(self, tensor: torch.Tensor) -> torch.Tensor:
        """This worker's block of the full sent ``tensor``."""
        return tensor if self.cut is None else self.cut(tensor)


class _Mapper:
    """A transcribed ``WeightsMapper`` (prefix renames and stacked entries only) with its ``apply`` semantics."""

    def __init__(self, prefix: dict[str, str] | None = None, stacked: dict[str, tuple[str, str | int]] | None = None):
        self.prefix, self.stacked = prefix or {}, stacked or {}

    def map(self, name: str) -> tuple[str, str | int | None]:
        shard = None
        for substr, (new, shard_id) in self.stacked.items():
            if substr in name:
                name, shard = name.replace(substr, new, 1), shard_id
        for prefix, new in self.prefix.items():
            if name.startswith(prefix):
                name = name.replace(prefix, new, 1)
        return name, shard


_QKV = {".q_proj": (".qkv_proj", "q"), ".k_proj": (".qkv_proj", "k"), ".v_proj": (".qkv_proj", "v")}
_GATE_UP = {".gate_proj": (".gate_up_proj", 0), ".up_proj": (".gate_up_proj", 1)}
_QWEN_VL_PREFIX = {
    "model.language_model.": "language_model.model.",
    "model.visual.": "visual.",
    "lm_head.": "language_model.lm_head.",
    "model.": "language_model.model.",
}
_QWEN25_VISION = {
    ".attn.q.": (".attn.qkv.", "q"),
    ".attn.k.": (".attn.qkv.", "k"),
    ".attn.v.": (".attn.qkv.", "v"),
    ".mlp.gate_proj.": (".mlp.gate_up_proj.", 0),
    ".mlp.up_proj.": (".mlp.gate_up_proj.", 1),
}
_QWEN2_VISION = {".q_proj": (".qkv", "q"), ".k_proj": (".qkv", "k"), ".v_proj": (".qkv", "v")}
# vLLM 0.32's mappers of the families we ship, by architecture: ``{module path: mapper}``, module paths in the vLLM
# model (read from models/qwen2.py, qwen2_vl.py, qwen2_5_vl.py, idefics3.py, idefics2_vision_model.py, llama.py)
FALLBACK_MAPPERS: dict[str, dict[str, _Mapper]] = {
    "Qwen2ForCausalLM": {"": _Mapper(stacked=_QKV | _GATE_UP)},
    "Qwen2VLForConditionalGeneration": {
        "": _Mapper(prefix=_QWEN_VL_PREFIX),
        "visual": _Mapper(stacked=_QWEN2_VISION),
        "language_model": _Mapper(stacked=_QKV | _GATE_UP),
    },
    "Qwen2_5_VLForConditionalGeneration": {
        "": _Mapper(prefix=_QWEN_VL_PREFIX),
        "visual": _Mapper(stacked=_QWEN25_VISION),
        "language_model": _Mapper(stacked=_QKV | _GATE_UP),
    },
    "Idefics3ForConditionalGeneration": {
        "model.vision_model": _Mapper(stacked=_QKV),
        "model.text_model": _Mapper(stacked=_QKV | _GATE_UP),
    },
}


def table_name(architecture: str, hf_name: str) -> tuple[str, str | int | None]:
    """``hf_name`` mapped by :data:`FALLBACK_MAPPERS` alone, without a model (a vLLM name and shard id; the name
    unchanged for an architecture without a table)."""
    return map_by_paths(FALLBACK_MAPPERS.get(architecture, {}), hf_name)


def map_by_paths(mappers: dict, hf_name: str) -> tuple[str, str | int | None]:
    """``hf_name`` mapped by ``{module path: mapper}`` (a transcribed mapper or vLLM's ``WeightsMapper``): each
    applies to the name relative to its module, from the root down, as in :meth:`EngineNames._walk`."""
    name, shard = hf_name, None
    for path, mapper in sorted(mappers.items(), key=lambda item: len(item[0].split(".")) if item[0] else 0):
        if path and not name.startswith(path + "."):
            continue
        relative, new_shard = _apply(mapper, name[len(path) + 1 :] if path else name)
        name, shard = (f"{path}.{relative}" if path else relative), (new_shard if new_shard is not None else shard)
    return name, shard


def table_groups(architecture: str, hf_names) -> list[list[str]]:
    """The sent names that feed each vLLM module (by :func:`table_name`), for modules fed by more than one."""
    by_module: dict[str, list[str]] = {}
    for name in hf_names:
        by_module.setdefault(table_name(architecture, name)[0].rpartition(".")[0], []).append(name)
    return [names for names in by_module.values() if len(names) > 1]


class EngineNames:
    """Maps sent HF names onto a vLLM model's parameters (see the module docstring). ``model``: the worker's model
    (``model_runner.get_model()``), or any module tree laid out like one (unit tests)."""

    def __init__(self, model: nn.Module, use_instance_mappers: bool = True):
        self.model = model
        self.modules = dict(model.named_modules())
        # with LoRA enabled vLLM wraps each linear: ``qkv_proj.base_layer.weight`` answers to ``qkv_proj.weight``
        self.params = {name.replace(".base_layer.", "."): name for name, _ in model.named_parameters()}
        self.use_instance_mappers = use_instance_mappers
        self.fallback = FALLBACK_MAPPERS.get(type(model).__name__, {})
        self.packed = dict(getattr(model, "packed_modules_mapping", None) or {})
        self._cache: dict[str, Target | None] = {}

    def target(self, hf_name: str) -> Target | None:
        """The vLLM parameter ``hf_name`` loads into, or None when no mapping lands on a parameter of the model."""
        if hf_name not in self._cache:
            self._cache[hf_name] = self._resolve(hf_name)
        return self._cache[hf_name]

    def _resolve(self, hf_name: str) -> Target | None:
        candidates = []
        if self.use_instance_mappers:
            candidates.append(self._walk(hf_name, self._instance_mapper))
        if self.fallback:
            candidates.append(self._walk(hf_name, lambda path, _module: self.fallback.get(path)))
        candidates.append(self._packed(hf_name))
        for name, shard in candidates:
            if name in self.params:
                param = self.params[name]
                return Target(param, param.rpartition(".")[0], shard)
        return None

    def _instance_mapper(self, _path: str, module: nn.Module):
        return getattr(module, "hf_to_vllm_mapper", None)

    def _walk(self, name: str, mapper_of: Callable) -> tuple[str, str | int | None]:
        """Apply each module's mapper to the name relative to it, from the root down (as vLLM's loaders do)."""
        path, rest, shard, module = "", name, None, self.model
        while True:
            mapper = mapper_of(path, module)
            if mapper is not None:
                rest, new_shard = _apply(mapper, rest)
                shard = new_shard if new_shard is not None else shard
            head, _, tail = rest.partition(".")
            child = getattr(module, "_modules", {}).get(head)
            if not tail or child is None:
                return (f"{path}.{rest}" if path else rest), shard
            path, rest, module = (f"{path}.{head}" if path else head), tail, child

    def _packed(self, name: str) -> tuple[str, str | int | None]:
        """The model's ``packed_modules_mapping``: ``...q_proj.weight`` -> ``...qkv_proj.weight``, sub-part 0."""
        parts = name.split(".")
        for i, part in enumerate(parts):
            for fused, sources in self.packed.items():
                if part in sources and len(sources) > 1:
                    index = sources.index(part)
                    shard = "qkv"[index] if fused.startswith("qkv") and len(sources) == 3 else index
                    return ".".join(parts[:i] + [fused] + parts[i + 1 :]), shard
        return name, None

    def groups(self, hf_names) -> list[list[str]]:
        """The sent names that feed each vLLM module, for the modules fed by more than one (what a bucket must not
        split: ``reload_units.check_plan``)."""
        by_module: dict[str, list[str]] = {}
        for name in hf_names:
            target = self.target(name)
            if target is not None:
                by_module.setdefault(target.module, []).append(name)
        return [names for names in by_module.values() if len(names) > 1]

    def param(self, target: Target) -> torch.Tensor:
        """The live parameter ``target`` names."""
        return self.modules[target.module].get_parameter(target.param.rpartition(".")[2])

    def pieces(self, target: Target) -> list[Piece]:
        """The blocks of this worker's ``target.param`` predicted from the sent tensor that loads into it."""
        return pieces(self.modules[target.module], self.param(target), target.shard)


def _apply(mapper, name: str) -> tuple[str, str | int | None]:
    if isinstance(mapper, _Mapper):
        return mapper.map(name)
    mapped = list(mapper.apply([(name, torch.empty(0))]))  # vLLM's WeightsMapper (public): the name, its shard id
    if not mapped:
        return name, None
    return mapped[0][0], getattr(mapped[0][1], "shard_id", None)


def _kinds(module: nn.Module) -> set[str]:
    return {cls.__name__ for cls in type(module).__mro__}


def pieces(module: nn.Module, param: torch.Tensor, shard: str | int | None) -> list[Piece]:
    """See :meth:`EngineNames.pieces`: ``module`` owns ``param``; ``shard`` the sub-part id (or None). Blocks are
    cut along dim 0 (``output_dim``) of fused and vocabulary-parallel parameters, the only layout vLLM 0.32 gives
    them; a whole-parameter cut (row-parallel, replicated) may be along any dim."""
    kinds = _kinds(module)
    tp_size, rank = int(getattr(module, "tp_size", 1) or 1), int(getattr(module, "tp_rank", 0) or 0)
    row = int(torch.Size(param.shape[1:]).numel()) if param.dim() > 1 else 1
    output_dim, input_dim = getattr(param, "output_dim", None), getattr(param, "input_dim", None)
    if "QKVParallelLinear" in kinds and output_dim == 0:
        heads, kv = int(module.num_heads), int(module.num_kv_heads)
        head, v_head = int(module.head_size), int(getattr(module, "v_head_size", module.head_size))
        replicas = int(getattr(module, "num_kv_head_replicas", 1) or 1)
        local = {"q": heads * head, "k": kv * head, "v": kv * v_head}
        total = {"q": int(module.total_num_heads) * head, "k": int(module.total_num_kv_heads) * head}
        total["v"] = int(module.total_num_kv_heads) * v_head
        source_rank = {"q": rank, "k": rank // replicas, "v": rank // replicas}
        order = ["q", "k", "v"]
        starts = {s: sum(total[o] for o in order[: order.index(s)]) for s in order}  # in a fused source
        parts = order if shard is None else [shard]
        return [
            Piece(
                offset=sum(local[o] for o in order[: order.index(s)]) * row,
                cut=_rows(output_dim, (starts[s] if shard is None else 0) + source_rank[s] * local[s], local[s]),
            )
            for s in parts
        ]
    if "MergedColumnParallelLinear" in kinds and output_dim == 0:
        sizes = [int(s) // tp_size for s in module.output_sizes]
        totals = [int(s) for s in module.output_sizes]
        parts = range(len(sizes)) if shard is None else [int(shard)]
        return [
            Piece(
                offset=sum(sizes[:i]) * row,
                cut=_rows(output_dim, (sum(totals[:i]) if shard is None else 0) + rank * sizes[i], sizes[i]),
            )
            for i in parts
        ]
    if "VocabParallelEmbedding" in kinds and output_dim == 0:
        indices = module.shard_indices
        start, end = int(indices.org_vocab_start_index), int(indices.org_vocab_end_index)
        return [Piece(0, _rows(output_dim, start, end - start), padded=True)]
    if "ColumnParallelLinear" in kinds and output_dim is not None and tp_size > 1:
        size = int(param.shape[output_dim])
        return [Piece(0, _rows(output_dim, rank * size, size))]
    if "RowParallelLinear" in kinds and input_dim is not None and tp_size > 1:
        size = int(param.shape[input_dim])
        return [Piece(0, _rows(input_dim, rank * size, size))]
    return [Piece(0)]


def _rows(dim: int, start: int, size: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def cut(tensor: torch.Tensor) -> torch.Tensor:
        return tensor.narrow(dim, start, size).contiguous()

    return cut

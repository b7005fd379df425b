"""The units a weight-sync bucket must never split: what vLLM's layer-wise reload rebuilds as one piece.

vLLM 0.32 reloads weights module by module (``model_loader/reload/layerwise.py``): each module that owns parameters
waits until every element of its parameters has arrived in one ``reload_weights`` call, then is rebuilt in fresh
memory and copied into the live tensors. A module that received only part of its elements in a call (a fused
``gate_up_proj`` whose ``gate_proj`` came in one bucket and ``up_proj`` in the next) is processed at the end of
that call anyway, and the elements that never arrived are copied from uninitialised memory into the live weights.
So a bucket may end only between units that contain every engine module whole.

:func:`module_units` derives the units from the model's own module tree (no list of names):

1. inside a repeated stack, the **outermost element of a** ``nn.ModuleList`` that holds the parameter: a decoder
   layer (``model.layers.7``), a vision block (``model.visual.blocks.3``), an encoder layer
   (``model.vision_model.encoder.layers.5``). Every fusion vLLM does in the families we ship (q/k/v into
   ``qkv_proj``, gate/up into ``gate_up_proj``, in the text model and the vision tower) is between siblings inside
   one such element; a mixture of experts, whose experts vLLM fuses into one module, is one element too.
2. outside every stack, the **outermost module that holds no** ``nn.ModuleList``: a stage of the model beside its
   stacks (``model.embed_tokens``, ``model.norm``, ``lm_head``, the vision tower's ``patch_embed`` and
   ``merger``, Idefics3's ``embeddings`` and ``connector``). vLLM builds each stage from modules of its own, so a
   stage kept whole contains every module it fuses.

The rule over-approximates the engine's modules (a decoder layer holds several), which costs nothing: a unit is far
below a bucket except a 7B layer, which gets a bucket of its own anyway. The engine's real modules are checked
against the plan by :func:`check_plan` (``WeightSyncer`` asks an engine which HF tensors feed each of its modules),
so a family whose engine fuses across units is refused at planning time instead of corrupted at the first sync.

Pure torch (``nn.Module`` traversal); no Ray, DeepSpeed or vLLM.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from torch import nn

_INDEX = re.compile(r"^(.*?\.\d+)\.")


def module_units(model: nn.Module) -> dict[str, str]:
    """``{parameter name: unit name}`` for every parameter of ``model`` (``named_parameters()`` names and order).

    The unit is the outermost ancestor that is an element of an ``nn.ModuleList``; outside every ModuleList, the
    outermost ancestor that holds none (the owning module when every ancestor holds one). See the module docstring.
    """
    holds_list = _modules_holding_a_list(model)
    list_elements = {
        f"{name}.{child}" if name else child
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList)
        for child, _ in module.named_children()
    }
    units = {}
    for name, _ in model.named_parameters():
        parts = name.split(".")[:-1]  # the owning module's path
        prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
        unit = next((p for p in prefixes if p in list_elements), None)
        if unit is None:
            unit = next((p for p in prefixes if p not in holds_list), ".".join(parts) or name)
        units[name] = unit
    return units


def _modules_holding_a_list(model: nn.Module) -> set[str]:
    """Names of the modules that are, or have below them, an ``nn.ModuleList``."""
    holding: set[str] = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList):
            parts = name.split(".") if name else []
            holding.update(".".join(parts[:i]) for i in range(len(parts) + 1))
    return holding


def name_unit(name: str) -> str:
    """The unit of a parameter known only by its name (no module tree at hand): the prefix up to the outermost
    integer component (the element of an indexed container, as ``named_parameters()`` writes a ModuleList's),
    else the owning module. ``model.visual.blocks.3.mlp.up_proj.weight`` -> ``model.visual.blocks.3``;
    ``lm_head.weight`` -> ``lm_head``. Coarser knowledge than :func:`module_units`; for callers without a model."""
    match = _INDEX.match(name)
    if match:
        return match.group(1)
    owner = name.rpartition(".")[0]
    return owner or name


def plan_buckets(
    named_sizes: Iterable[tuple[str, int]],
    bucket_bytes: int,
    units: Mapping[str, str] | Callable[[str], str] | None = None,
) -> list[list[str]]:
    """Split tensor names (in order) into buckets of at most ``bucket_bytes`` that never split a unit.

    ``named_sizes`` yields ``(name, size_in_bytes)``; ``units``: each name's unit (:func:`module_units`, a
    function of the name, or None for :func:`name_unit`). The tensors of one unit must be contiguous in the order
    (true for ``named_parameters()``); a unit larger than ``bucket_bytes`` becomes a bucket of its own. The plan is
    checked before it is returned (:func:`check_plan`)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    unit_of = units.__getitem__ if isinstance(units, Mapping) else units or name_unit
    groups: list[tuple[str, list[str], int]] = []  # (unit, names, bytes)
    seen: set[str] = set()
    for name, size in named_sizes:
        key = unit_of(name)
        if groups and groups[-1][0] == key:
            groups[-1] = (key, groups[-1][1] + [name], groups[-1][2] + size)
            continue
        if key in seen:
            raise ValueError(f"parameters of unit {key!r} are not contiguous (at {name!r})")
        seen.add(key)
        groups.append((key, [name], size))
    buckets: list[list[str]] = []
    current: list[str] = []
    current_bytes = 0
    for _, names, size in groups:
        if current and current_bytes + size > bucket_bytes:
            buckets.append(current)
            current, current_bytes = [], 0
        current.extend(names)
        current_bytes += size
    if current:
        buckets.append(current)
    check_plan(buckets, [names for _, names, _ in groups])
    return buckets


def check_plan(buckets: Sequence[Sequence[str]], groups: Iterable[Iterable[str]], what: str = "unit") -> None:
    """Refuse a bucket plan that splits a group of tensors that must load together.

    ``buckets``: tensor names per bucket; ``groups``: sets of tensor names that must share a bucket (a unit of
    :func:`module_units`, or the HF tensors that feed one engine module). Names of a group that no bucket holds
    are ignored (a sync of the trainable parameters only). Raises ``ValueError`` naming the first split groups and
    the buckets they would fall in."""
    bucket_of = {name: k for k, names in enumerate(buckets) for name in names}
    split = []
    for group in groups:
        members = sorted(group)
        placed = {bucket_of[n] for n in members if n in bucket_of}
        if len(placed) > 1:
            where = ", ".join(f"{n} (bucket {bucket_of[n]})" for n in members if n in bucket_of)
            split.append(where)
    if split:
        shown = "; ".join(split[:3]) + (f"; and {len(split) - 3} more" if len(split) > 3 else "")
        raise ValueError(
            f"weight-sync plan refused: it would split {len(split)} {what}(s) across buckets, and vLLM's layer-wise "
            f"reload would then copy uninitialised memory into the part that arrived in the other bucket: {shown}"
        )


def groups_of(units: Mapping[str, str]) -> list[list[str]]:
    """The names of each unit, in first-seen order (``{name: unit}`` -> ``[[names of unit 1], ...]``)."""
    grouped: dict[str, list[str]] = {}
    for name, unit in units.items():
        grouped.setdefault(unit, []).append(name)
    return list(grouped.values())

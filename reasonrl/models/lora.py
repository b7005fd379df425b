"""LoRA adapters on a causal LM, through PEFT: the one module of reasonrl that calls PEFT.

A target linear layer ``y = x W^T (+ b)`` gets a low-rank update that trains while ``W`` stays frozen::

    W' = W + s * B @ A        W [out, in], A [r, in], B [out, r], s = lora_alpha / r
    y  = x W^T + s * dropout(x) A^T B^T

``B`` starts at zero, so the adapted model starts equal to the base model. With the adapter switched off
(:func:`adapter_disabled`) the model *is* the base model: that is the reference policy for the KL terms, with no
second copy of the weights.

Names. PEFT wraps the model: a parameter ``model.layers.0.self_attn.q_proj.weight`` of the base model becomes
``base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight``, beside ``...q_proj.lora_A.default.weight``
and ``...q_proj.lora_B.default.weight``. :func:`merge_plan` maps every base-model (Hugging Face) name to the PEFT
parameters it is computed from, so a weight sync or an export can send ``W'`` under the name vLLM and
``from_pretrained`` expect, computed per bucket (:func:`merged_tensors`) without ever changing ``W`` in the trainer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PEFT_PREFIX = "base_model.model."
ADAPTER = "default"  # PEFT's name of the (only) adapter
ALL_LINEAR = "all-linear"


@dataclasses.dataclass(frozen=True)
class LoraSettings:
    """The adapter: rank ``r``, ``alpha`` (scale ``alpha / r``), dropout on the adapter's input, and the target
    modules: names of linear layers (matched as the last parts of module names, e.g. ``q_proj`` or
    ``self_attn.q_proj``) or ``all-linear`` (every linear layer but the output head)."""

    rank: int
    alpha: float
    dropout: float = 0.0
    target_modules: tuple[str, ...] = (ALL_LINEAR,)
    exclude_prefixes: tuple[str, ...] = ()  # modules under these name prefixes get no adapter (a frozen vision tower)

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


@dataclasses.dataclass(frozen=True)
class MergedParam:
    """How one base-model parameter is computed from the PEFT model's parameters: ``source`` alone, or
    ``source + scale * lora_b @ lora_a`` for the weight of a target layer."""

    source: str
    lora_a: str | None = None
    lora_b: str | None = None
    scale: float = 0.0

    @property
    def sources(self) -> list[str]:
        return [self.source] + ([self.lora_a, self.lora_b] if self.lora_a else [])


def linear_layer_names(model) -> list[str]:
    """Names of the model's ``nn.Linear`` modules other than the output head (what ``all-linear`` targets)."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head]


def target_problems(model, target_modules: Sequence[str]) -> list[str]:
    """Why ``target_modules`` cannot adapt ``model`` (empty when it can): a target that matches no linear layer,
    named with the layer names the model has. Runs on a meta-device model (no weights) before start-up."""
    linear = linear_layer_names(model)
    if not linear:
        return ["lora_target_modules: the model has no linear layers to adapt"]
    problems = []
    suffixes = sorted({n.rsplit(".", 1)[-1] for n in linear})
    for target in target_modules:
        if target == ALL_LINEAR:
            continue
        if not any(n == target or n.endswith("." + target) for n in linear):
            problems.append(
                f"lora_target_modules: {target!r} matches no linear layer of the model; its linear layers are "
                f"{suffixes} (or use {ALL_LINEAR!r})"
            )
    return problems


def lora_problems(model_path: str, target_modules) -> list[str]:
    """Why LoRA adapters on ``target_modules`` cannot be added to the model at ``model_path`` (empty when they
    can), checked on a meta-device model built from its config: no weights are read."""
    import torch
    from transformers import AutoConfig

    from reasonrl.models.vision import auto_model_class

    config = AutoConfig.from_pretrained(model_path)
    with torch.device("meta"):
        model = auto_model_class(config).from_config(config)  # a vision-language model with its image-text class
    return [f"{p} (pretrain={model_path})" for p in target_problems(model, list(target_modules))]


def _peft_config(settings: LoraSettings):
    from peft import LoraConfig

    targets = list(settings.target_modules)
    exclude = None
    if settings.exclude_prefixes:  # PEFT matches a string as a regex over the full module name
        exclude = "|".join(re.escape(p.rstrip(".")) + r"(\..*)?" for p in settings.exclude_prefixes)
    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=ALL_LINEAR if ALL_LINEAR in targets else targets,
        exclude_modules=exclude,
        bias="none",
        task_type="CAUSAL_LM",
    )


def add_adapters(model, settings: LoraSettings):
    """``model`` with LoRA adapters on its target layers (PEFT ``get_peft_model``): only the adapters train."""
    from peft import get_peft_model

    problems = target_problems(model, settings.target_modules)
    if problems:
        raise ValueError("; ".join(problems))
    # the adapters in the base model's dtype (PEFT would upcast them to fp32 beside a bf16 base): DeepSpeed's bf16
    # training keeps fp32 master copies itself, and its ZeRO-3 partitions and the sync expect one dtype
    return get_peft_model(model, _peft_config(settings), autocast_adapter_dtype=False)


def is_adapted(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


@contextlib.contextmanager
def adapter_disabled(model):
    """Inside the block ``model`` computes as its base model (the reference policy)."""
    with model.disable_adapter():
        yield


def base_name(peft_name: str) -> str:
    """The base model's (Hugging Face) name of a PEFT parameter or buffer name."""
    return peft_name.removeprefix(PEFT_PREFIX).replace(".base_layer.", ".")


def merge_plan(model) -> dict[str, MergedParam]:
    """``{base-model name: MergedParam}`` for every parameter of the base model, in ``named_parameters()`` order
    (adapter parameters themselves are not in it)."""
    from peft.tuners.lora import LoraLayer

    adapted: dict[str, MergedParam] = {}
    for module_name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
            adapted[f"{module_name}.base_layer.weight"] = MergedParam(
                source=f"{module_name}.base_layer.weight",
                lora_a=f"{module_name}.lora_A.{ADAPTER}.weight",
                lora_b=f"{module_name}.lora_B.{ADAPTER}.weight",
                scale=float(module.scaling[ADAPTER]),
            )
    plan = {}
    for name, _ in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            continue
        plan[base_name(name)] = adapted.get(name, MergedParam(source=name))
    return plan


def merged_tensors(plan: Mapping[str, MergedParam], names: Iterable[str], gathered: Mapping[str, Any]):
    """``{base name: tensor}`` for ``names``, from the gathered PEFT parameters (``W + scale * B @ A`` in float32,
    cast back to ``W``'s dtype, for adapted weights; the source tensor itself otherwise)."""
    out = {}
    for name in names:
        entry = plan[name]
        weight = gathered[entry.source]
        if entry.lora_a is not None:
            delta = gathered[entry.lora_b].float() @ gathered[entry.lora_a].float()
            weight = (weight.float() + entry.scale * delta).to(weight.dtype)
        out[name] = weight
    return out


def adapter_param_names(model) -> list[str]:
    """The adapter's parameters (``lora_A`` / ``lora_B`` of every adapted layer), in ``named_parameters()`` order."""
    return [n for n, _ in model.named_parameters() if ".lora_A." in n or ".lora_B." in n]


def save_adapter(model, tensors: Mapping[str, Any], out_dir) -> None:
    """Write the adapter alone as PEFT does (``adapter_config.json`` + ``adapter_model.safetensors``; loads with
    ``PeftModel.from_pretrained(base, out_dir)``) from its gathered full ``tensors`` (ZeRO-3 partitions them)."""
    model.save_pretrained(str(out_dir), state_dict=dict(tensors), safe_serialization=True)

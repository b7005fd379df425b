"""Hugging Face export of a (possibly ZeRO-3-partitioned) model, streamed in safetensors shards.

The folder holds what ``save_pretrained`` writes (config, generation config, ``model.safetensors`` or
``model-0000k-of-0000N.safetensors`` + ``model.safetensors.index.json``, the same tensor names) and loads with
``from_pretrained`` and vLLM. Collective: every rank joins the bucketed all-gathers of the DeepSpeed adapter
(:func:`reasonrl.distributed.deepspeed_engine.gather_params`, the only place that calls DeepSpeed); rank 0 writes each
shard as soon as it is gathered, so it holds at most one shard (plus one bucket) of host memory, not the model.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from reasonrl.distributed.deepspeed_engine import DEFAULT_BUCKET_BYTES, _rank, gather_full_state_dict, gather_params
from reasonrl.distributed.ds_config import require_field
from reasonrl.distributed.param_gather import persistent_buffer_names, split_by_size

DEFAULT_MAX_SHARD_BYTES = 2 * 1024**3
SINGLE_WEIGHTS_FILE = "model.safetensors"  # transformers' SAFE_WEIGHTS_NAME
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"  # transformers' SAFE_WEIGHTS_INDEX_NAME


def shard_file_name(index: int, num_shards: int) -> str:
    """Hugging Face's shard naming: ``model-00001-of-00003.safetensors`` (``model.safetensors`` when alone)."""
    return SINGLE_WEIGHTS_FILE if num_shards == 1 else f"model-{index + 1:05d}-of-{num_shards:05d}.safetensors"


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def lora_merge(module) -> tuple[Any, dict | None]:
    """``(model to export, merge plan)``: a PEFT-adapted policy is exported as its base model with every adapted
    weight merged (``W + s*B@A``, :mod:`reasonrl.models.lora`), a plain model as it is (plan None)."""
    from reasonrl.models.lora import is_adapted, merge_plan

    if not is_adapted(module):
        return module, None
    base = module.get_base_model()  # the Hugging Face model, with PEFT's layers inside
    return base, merge_plan(base)


def hf_save_entries(module, merge: dict | None = None) -> list[tuple[str, str, Any]]:
    """What ``save_pretrained`` would write, without gathering anything: ``(saved name, source name, meta)``
    where ``meta`` is a meta-device tensor of the full shape and dtype.

    Source names are the ``named_parameters()`` names (each tensor gathered once) or persistent buffer names; with
    a LoRA ``merge`` plan (:func:`lora_merge`), the base model's names, each computed from its plan's sources. The
    saved names come from transformers' own rules, applied to meta placeholders of the full shapes
    (``ds_shape`` under ZeRO-3): ``_keys_to_ignore_on_save`` is dropped and of tied weights (one tensor under
    several names, e.g. ``lm_head.weight`` = ``model.embed_tokens.weight`` with ``tie_word_embeddings``) only the
    name ``from_pretrained`` expects is kept (``remove_tied_weights_from_state_dict``). Identical on all ranks.
    """
    import torch
    from transformers.modeling_utils import remove_tied_weights_from_state_dict

    source_of: dict[str, str] = {}  # every parameter name (tied aliases included) -> its named_parameters() name
    first_name: dict[int, str] = {}
    placeholders: dict[str, torch.Tensor] = {}
    if merge is None:
        named = [(name, param) for name, param in module.named_parameters(remove_duplicate=False)]
    else:
        params = dict(module.named_parameters())
        named = [(name, params[entry.source]) for name, entry in merge.items()]
    for name, param in named:
        source_of[name] = first_name.setdefault(id(param), name)
        placeholders[name] = torch.empty(
            tuple(getattr(param, "ds_shape", param.shape)), dtype=param.dtype, device="meta"
        )
    for name in persistent_buffer_names(module):
        source_of[name] = name
        buf = module.get_buffer(name)
        placeholders[name] = torch.empty(buf.shape, dtype=buf.dtype, device="meta")
    for name in getattr(module, "_keys_to_ignore_on_save", None) or ():
        placeholders.pop(name, None)
    kept = remove_tied_weights_from_state_dict(placeholders, module)
    return [(name, source_of[name], meta) for name, meta in kept.items()]


def gather_for_export(
    module, entries: list[tuple[str, str, Any]], bucket_bytes: int, merge: dict | None = None
) -> dict[str, Any]:
    """Full tensors of one export shard, ``{saved name: CPU tensor}`` on rank 0 and ``{}`` elsewhere.

    Collective: parameters are all-gathered in buckets of <= ``bucket_bytes`` (:func:`gather_params`); buffers
    are never partitioned and are copied locally. A tensor saved under two names gets a copy for the second
    (safetensors refuses aliased tensors). With a LoRA ``merge`` plan each source is gathered with its adapter and
    merged on rank 0.
    """
    from reasonrl.models.lora import merged_tensors

    buffers = set(persistent_buffer_names(module))
    sizes = {n: getattr(p, "ds_numel", p.numel()) * p.element_size() for n, p in module.named_parameters()}
    params = []
    for _, source, meta in entries:
        if source not in buffers:
            params += [(source, _nbytes(meta))] if merge is None else [(n, sizes[n]) for n in merge[source].sources]
    gathered: dict[str, Any] = {}
    for names in split_by_size(list(dict(params).items()), bucket_bytes):
        gathered.update(gather_params(module, names, rank0_only=True))
    if _rank() != 0:
        return {}
    if merge is not None:  # rank 0 alone: raised errors are kept by _write_hf_weights until the last gather
        gathered = merged_tensors(merge, [source for _, source, _ in entries if source not in buffers], gathered)
    out: dict[str, Any] = {}
    used: set[str] = set()
    for saved, source, _ in entries:
        if source in buffers:
            tensor = module.get_buffer(source).detach().cpu().clone()
        else:
            tensor = gathered[source] if source not in used else gathered[source].clone()
            used.add(source)
        out[saved] = tensor.contiguous()
    return out


class _ShardWriter:
    """Rank 0's side of :func:`export_hf`: writes each shard as it comes, then the index.

    A failure (making the folder, writing a shard) is kept, not raised, so rank 0 keeps joining the remaining
    all-gathers (raising mid-way would leave the other ranks waiting in a collective until the process group
    times out); :meth:`finish` raises it.
    """

    def __init__(self, module, out: Path, num_shards: int) -> None:
        self.module, self.out, self.num_shards = module, out, num_shards
        self.weight_map: dict[str, str] = {}
        self.total_size = 0
        self.error: Exception | None = None
        try:
            out.mkdir(parents=True, exist_ok=True)
            for stale in [*out.glob("model*.safetensors"), *out.glob("model.safetensors.index.json")]:
                stale.unlink()  # left by an earlier export into the same folder: from_pretrained would mix them in
        except Exception as exc:  # re-raised by finish() once the collective is over
            self.error = exc

    def write(self, index: int, tensors: dict[str, Any]) -> None:
        if self.error is not None:
            return
        try:
            from safetensors.torch import save_file
            from transformers.core_model_loading import revert_weight_conversion

            tensors = revert_weight_conversion(self.module, tensors)  # per shard, as transformers' offloaded save
            name = shard_file_name(index, self.num_shards)
            save_file({k: v.contiguous() for k, v in tensors.items()}, str(self.out / name), metadata={"format": "pt"})
            self.weight_map.update(dict.fromkeys(tensors, name))
            self.total_size += sum(_nbytes(t) for t in tensors.values())
        except Exception as exc:  # re-raised by finish() once the collective is over
            self.error = exc

    def finish(self, expected_names: set[str]) -> None:
        import json

        if self.error is not None:
            raise self.error
        require_field(
            set(self.weight_map) == expected_names,
            "export_hf",
            "per-shard weight conversion did not give save_pretrained's names (a conversion spans shards; raise "
            f"max_shard_bytes): missing {sorted(expected_names - set(self.weight_map))[:5]}, "
            f"extra {sorted(set(self.weight_map) - expected_names)[:5]}",
        )
        if self.num_shards > 1:
            index = {"metadata": {"total_size": self.total_size}, "weight_map": dict(sorted(self.weight_map.items()))}
            (self.out / WEIGHTS_INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def save_hf_config(module, out: Path) -> None:
    """``config.json`` (+ ``generation_config.json`` for generative models) as ``save_pretrained`` writes them:
    the config records the module's dtype and class name (``architectures``, which vLLM reads)."""
    import copy

    config = copy.deepcopy(module.config)
    config.dtype = str(module.dtype).split(".")[1]
    config.architectures = [type(module).__name__]
    config.save_pretrained(out)
    if module.can_generate() and getattr(module, "generation_config", None) is not None:
        module.generation_config.save_pretrained(out)


def export_hf(
    engine_or_module,
    out_dir: str | Path,
    tokenizer=None,
    *,
    save_fn: Callable[[Any, Path, dict[str, Any]], Any] | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> Path | None:
    """Write an HF folder (config + safetensors [+ tokenizer]) from a possibly ZeRO-3-partitioned model, streaming.

    Collective: every rank calls it; rank 0 writes and returns ``out_dir``, the others return ``None`` after the
    last gather (no barrier). The layout is ``save_pretrained``'s, read by ``from_pretrained`` and vLLM:
    ``model-0000k-of-0000N.safetensors`` shards of <= ``max_shard_bytes`` each (a larger tensor alone in its
    shard) plus ``model.safetensors.index.json`` (``{"metadata": {"total_size": bytes}, "weight_map": {name:
    file}}``), or one ``model.safetensors`` when everything fits; ``{"format": "pt"}`` metadata in each file;
    ``config.json`` / ``generation_config.json`` from the module. Tensor names are the ones ``save_pretrained``
    writes (:func:`hf_save_entries`: tied weights once, ignored keys dropped, weight conversions reverted per
    shard).

    Memory: the shard plan is made from the full sizes before anything is gathered; each shard is all-gathered
    in buckets of <= ``bucket_bytes`` and written as soon as it is complete, so rank 0 holds at most one shard
    (about ``max(max_shard_bytes, largest tensor)``) of full tensors at a time, not the model (64 GB for a 32B
    bf16 model). No second model is built and no global ``HfDeepSpeedConfig`` has to be unset (pitfall D4).

    ``save_fn(module, out_dir, state_dict)`` replaces the weight writing for non-HF modules (the critic's
    ``save_critic``). That path still gathers the FULL state dict on rank 0 (as large as the policy's for a critic
    of the same size), because ``save_fn`` takes one state dict. Errors raise (on rank 0 after the last gather, so
    the other ranks are not left waiting in a collective); the caller makes the directory atomic.
    """
    module, merge = lora_merge(getattr(engine_or_module, "module", engine_or_module))  # LoRA: merged, base names
    require_field(max_shard_bytes > 0, "max_shard_bytes", f"must be > 0, got {max_shard_bytes!r}")
    require_field(bucket_bytes > 0, "bucket_bytes", f"must be > 0, got {bucket_bytes!r}")
    out = Path(out_dir)
    if save_fn is not None:
        require_field(merge is None, "export_hf", "save_fn exports (the critic) take no LoRA adapters")
        state = gather_full_state_dict(module, rank0_only=True, bucket_bytes=bucket_bytes)
        if state is None:
            return None
        out.mkdir(parents=True, exist_ok=True)
        save_fn(module, out, state)
    else:
        if not _write_hf_weights(module, out, max_shard_bytes, bucket_bytes, merge):
            return None
        save_hf_config(module, out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def _write_hf_weights(module, out: Path, max_shard_bytes: int, bucket_bytes: int, merge: dict | None) -> bool:
    """The streaming part of :func:`export_hf` (collective). Returns whether this rank wrote (rank 0)."""
    from transformers.core_model_loading import revert_weight_conversion

    require_field(
        not getattr(module, "_hf_peft_config_loaded", False) and getattr(module, "hf_quantizer", None) is None,
        "export_hf",
        "PEFT adapters and quantized models are not supported by the streaming export",
    )
    entries = hf_save_entries(module, merge)
    shards = split_by_size([(entry, _nbytes(entry[2])) for entry in entries], max_shard_bytes)
    writer = _ShardWriter(module, out, len(shards)) if _rank() == 0 else None
    for index, shard in enumerate(shards):
        try:
            tensors = gather_for_export(module, shard, bucket_bytes, merge)
        except Exception as exc:  # rank 0's merge after the gather: keep going in step with the other ranks
            if writer is None:
                raise
            writer.error = writer.error or exc
            tensors = {}
        if writer is not None:
            writer.write(index, tensors)
        del tensors
    if writer is None:
        return False
    writer.finish(set(revert_weight_conversion(module, {name: meta for name, _, meta in entries})))
    return True

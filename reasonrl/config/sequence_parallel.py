"""Refusals of ``sequence_parallel_size`` (Ulysses sequence parallelism, docs/distributed.md), before anything starts.

Ulysses splits every sequence across N = ``sequence_parallel_size`` ranks and, inside attention, the heads: N must
divide the query and the key/value head counts of every model it runs (the policy, the reference, the critic) and
the rank count of every such role (its ranks form groups of N that share one micro-batch). The head counts are read
from the model's ``config.json`` where it is on disk (a local folder, or a Hub id's cached snapshot); an offline
model name (``tiny``, ...) is built later and checked by the worker that loads it
(``reasonrl.models.ulysses_attention.check_heads``). A vision-language model is refused: its vision tower's
features and 3-D positions need the whole sequence on one rank.

The PPO workers run each SP group's micro-batches in group rounds (``reasonrl.distributed.sp_rounds``); LoRA
adapters are refused with SP (the SP forward reads the base model's hidden states, which PEFT's wrapper hides).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reasonrl.utils.hub import hub_cache_dir, split_hub_id

FIELD = "sequence_parallel_size"


def _config_json(value: str | None) -> dict[str, Any] | None:
    """The model's config.json as a dict: a local folder's or a Hub id's cached snapshot's; None if not on disk."""
    if not value:
        return None
    path = Path(value).expanduser() / "config.json"
    hub = split_hub_id(value)
    if not path.is_file() and hub is not None:
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(hub[0], "config.json", cache_dir=hub_cache_dir(), revision=hub[1])
        except ValueError:  # an id the Hub would refuse: model_problems says so
            return None
        path = Path(cached) if isinstance(cached, str) else path
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def model_problems(size: int, field: str, value: str | None) -> list[str]:
    """Why the model of ``field`` cannot run with ``size`` ranks per sequence (empty when it can, or is unknown)."""
    config = _config_json(value)
    if config is None:
        return []
    if "vision_config" in config:
        return [
            f"{FIELD}={size}: {field}={value!r} is a vision-language model; its vision tower's features and 3-D "
            "positions need the whole sequence on one rank: set sequence_parallel_size=1"
        ]
    text = config.get("text_config") or config
    heads = text.get("num_attention_heads")
    counts = {"num_attention_heads": heads, "num_key_value_heads": text.get("num_key_value_heads") or heads}
    return [
        f"{FIELD}={size} must divide {field}'s {name}={count} (Ulysses gives each rank 1/{size} of the heads): "
        f"choose a divisor of {count}"
        for name, count in counts.items()
        if isinstance(count, int) and count % size
    ]


def sequence_parallel_problems(cfg) -> list[str]:
    """Problems of ``sequence_parallel_size`` (module docstring), each naming the field."""
    size = cfg.sequence_parallel_size
    if size < 1:
        return [f"{FIELD}={size}: must be >= 1 (1 = each sequence on one rank)"]
    if size == 1:
        return []
    roles = [("policy", cfg.policy_num_nodes * cfg.policy_devices_per_node)]
    models = [("pretrain", cfg.pretrain)]
    if cfg.use_reference:
        roles.append(("ref", cfg.ref_num_nodes * cfg.ref_devices_per_node))
    if cfg.use_critic:
        roles.append(("critic", cfg.critic_num_nodes * cfg.critic_devices_per_node))
        models.append(("critic_pretrain", cfg.critic_pretrain or cfg.pretrain))
    problems = [
        f"{FIELD}={size} must divide the {role} ranks ({role}_num_nodes x {role}_devices_per_node = {ranks}): each "
        f"group of {size} ranks shares one sequence"
        for role, ranks in roles
        if ranks % size
    ]
    for field, value in models:
        problems += model_problems(size, field, value)
    if cfg.lora_rank:
        problems.append(
            f"{FIELD}={size}: LoRA adapters (lora_rank={cfg.lora_rank}) are not served by sequence parallelism yet: "
            "set lora_rank=0 or sequence_parallel_size=1"
        )
    return problems

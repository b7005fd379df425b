"""Loading given weights into a live ``VLLMEngine`` actor in tests, through the engine's production calls: an
object-store sync (``load_packed`` per bucket, then ``finish_weight_sync``), as ``WeightSyncer`` drives it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import ray

from reasonrl.distributed import sync_group


def load_weights(engine, named_tensors: Iterable[tuple[str, Any]]) -> int:
    """Load HF-named full tensors into ``engine`` in place and finish the sync; returns how many were loaded."""
    weights = list(named_tensors)
    loaded = ray.get(engine.load_packed.remote(sync_group.bucket_layout(weights), sync_group.pack(weights)))
    ray.get(engine.finish_weight_sync.remote([name for name, _ in weights]))
    return loaded


def load_in_buckets(engine, buckets: Iterable[Iterable[str]], weights: dict[str, Any]) -> list[dict[str, Any]]:
    """Load ``weights`` (HF name -> full tensor) bucket by bucket, one ``load_packed`` call each, exactly as planned
    in ``buckets`` (names), then finish the sync; returns the workers' ``finish_weight_sync`` reports."""
    names = []
    for bucket in buckets:
        named = [(name, weights[name]) for name in bucket]
        names += [name for name, _ in named]
        ray.get(engine.load_packed.remote(sync_group.bucket_layout(named), sync_group.pack(named)))
    return ray.get(engine.finish_weight_sync.remote(names))

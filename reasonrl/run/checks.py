"""The checks a run makes before it starts anything expensive: the config's own (pure, ``BasePPOExpConfig.validate``)
together with those that need the data it names (:mod:`reasonrl.data.source_checks`: each source exists and parses,
no eval set is a training source), every problem in one :class:`~reasonrl.config.ConfigError`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reasonrl.config import BasePPOExpConfig


def validate_run(
    cfg: BasePPOExpConfig, cluster_resources: Mapping[str, float] | None = None, nodes: Sequence[Any] | None = None
) -> None:
    """:meth:`BasePPOExpConfig.validate` with the data checks: call it where a run starts, before ``ray.init`` (and
    again with the cluster's resources, as ``validate``)."""
    from reasonrl.data.source_checks import data_problems

    cfg.validate(cluster_resources, nodes, data_checks=data_problems)

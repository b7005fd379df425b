"""``gym:`` sources go through the same entry points as files and Hub ids: ``load_rows``, ``check_source`` and
``source_identity`` hand them to ``reasonrl.data.gym_source`` (skipped where that module or reasoning-gym is absent)."""

from __future__ import annotations

import pytest

from reasonrl.data import DataFormatError, load_rows
from reasonrl.data.sources import check_source, source_identity

gym_source = pytest.importorskip("reasonrl.data.gym_source")
pytest.importorskip("reasoning_gym")

SOURCE = "gym:basic_arithmetic:size=3:seed=5"


def test_gym_sources_are_routed_to_the_gym_module():
    rows = load_rows(SOURCE)
    assert [r["question"] for r in rows] == [r["question"] for r in gym_source.gym_source_rows(SOURCE)]
    assert len(load_rows(SOURCE, limit=2)) == 2
    check_source(SOURCE)
    assert source_identity(SOURCE) == gym_source.gym_source_identity(SOURCE)
    with pytest.raises(DataFormatError):
        check_source("gym:no_such_task_here")

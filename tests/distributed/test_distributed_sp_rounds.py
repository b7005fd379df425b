"""``reasonrl.distributed.sp_rounds`` on one process (a 1-rank gloo group): the refusal of a size that does not
divide the role's ranks, and the shape of the group rounds (payloads, dummies, the accumulation boundary). The
2-rank rounds run in the real workers: tests/distributed/test_distributed_sp_workers.py."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from reasonrl.distributed.sp_rounds import group_rounds, new_sp_groups


def test_a_size_that_does_not_divide_the_ranks_is_refused():
    with pytest.raises(ValueError, match="must divide the role's 6 ranks"):
        new_sp_groups(6, 4, 0)


@pytest.fixture
def one_rank(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_rounds_carry_payloads_and_mark_dummies_and_the_last_round(one_rank):
    group = new_sp_groups(1, 1, 0)
    micro_batches = [([0, 2], [([1], [2]), ([3], [4])], None), ([], [([0, 0], [0])], None)]
    rounds = list(group_rounds(micro_batches, group, payload=lambda idx, samples: ("slice", tuple(idx))))
    assert [(r.index, r.member, r.own, r.last) for r in rounds] == [(0, 0, True, False), (1, 0, True, True)]
    assert rounds[0].payload == ("slice", (0, 2)) and rounds[0].samples == [([1], [2]), ([3], [4])]
    assert rounds[1].payload is None  # a dummy: outputs discarded, loss weight 0
    assert [r.payload for r in group_rounds(micro_batches[:1], group)] == [[0, 2]]  # default payload: the indices

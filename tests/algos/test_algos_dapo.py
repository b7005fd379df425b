"""DAPO soft overlong punishment and the zero-reward-variance group predicate."""

import pytest
import torch
from torch.testing import assert_close

from reasonrl.algos import (
    dynamic_sampling_keep_mask,
    get_advantage_estimator,
    soft_overlong_punishment,
    zero_variance_groups,
)


def test_soft_overlong_punishment_hand_computed():
    lengths = torch.tensor([10, 15, 16, 18, 20, 25])
    # L_max = 20, L_cache = 5: free up to 15, linear to -1 at 20, -1 beyond
    out = soft_overlong_punishment(lengths, max_response_length=20, overlong_buffer_len=5)
    assert_close(out, torch.tensor([0.0, 0.0, -0.2, -0.6, -1.0, -1.0]))
    half = soft_overlong_punishment(lengths, max_response_length=20, overlong_buffer_len=5, penalty_factor=0.5)
    assert_close(half, out * 0.5)


def test_soft_overlong_punishment_validates_buffer():
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        soft_overlong_punishment(torch.tensor([1]), max_response_length=10, overlong_buffer_len=0)
    with pytest.raises(ValueError, match="overlong_buffer_len"):
        soft_overlong_punishment(torch.tensor([1]), max_response_length=10, overlong_buffer_len=11)


def test_zero_variance_groups_non_contiguous_and_singletons():
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 0.5, 3.0])
    group_ids = torch.tensor([4, 8, 4, 6, 8, 6, 2])
    # group 4: [1, 1] equal; group 8: [0, 1] varies; group 6: [0.5, 0.5] equal; group 2: singleton
    expected = torch.tensor([True, False, True, True, False, True, True])
    assert torch.equal(zero_variance_groups(rewards, group_ids), expected)
    assert torch.equal(dynamic_sampling_keep_mask(rewards, group_ids), ~expected)


def test_zero_variance_tolerance_for_continuous_rewards():
    rewards = torch.tensor([0.5, 0.5000001, 0.2, 0.9])
    group_ids = torch.tensor([0, 0, 1, 1])
    assert torch.equal(zero_variance_groups(rewards, group_ids), torch.tensor([False, False, False, False]))
    assert torch.equal(zero_variance_groups(rewards, group_ids, atol=1e-3), torch.tensor([True, True, False, False]))


def test_zero_variance_groups_are_exactly_the_zero_grpo_advantages():
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randint(0, 2, (32,), generator=gen).float()
    group_ids = torch.randint(0, 8, (32,), generator=gen)
    adv, _ = get_advantage_estimator("grpo")(token_rewards=rewards, action_mask=torch.ones(32, 2), group_ids=group_ids)
    zero_var = zero_variance_groups(rewards, group_ids)
    assert zero_var.any() and (~zero_var).any()
    assert (adv[zero_var] == 0).all()
    # in a group whose 0/1 rewards vary the mean lies strictly between 0 and 1, so no advantage is 0
    assert (adv[~zero_var, 0] != 0).all()

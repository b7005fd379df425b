"""PromptSampler: deterministic per-episode order, resumable from its state."""

from __future__ import annotations

import pytest

from reasonrl.data.sampler import PromptSampler

ROWS = [{"id": i} for i in range(10)]


def ids(batch):
    return [row["id"] for row in batch]


def drain(sampler):
    out = []
    while (batch := sampler.next_batch()) is not None:
        out.append(ids(batch))
    return out


def test_episodes_cover_the_data_in_seeded_order():
    batches = drain(PromptSampler(ROWS, batch_size=3, seed=1, num_episodes=2))
    assert len(batches) == 6  # 3 full batches per episode, the 10th row of each episode is dropped
    first, second = batches[:3], batches[3:]
    assert len({i for b in first for i in b}) == 9 and len({i for b in second for i in b}) == 9
    assert first != second  # each episode has its own permutation
    assert drain(PromptSampler(ROWS, batch_size=3, seed=1, num_episodes=2)) == batches  # same seed, same order
    assert drain(PromptSampler(ROWS, batch_size=3, seed=2, num_episodes=2)) != batches


def test_resume_from_state_draws_the_same_batches():
    full = drain(PromptSampler(ROWS, batch_size=3, seed=5, num_episodes=3))
    sampler = PromptSampler(ROWS, batch_size=3, seed=5, num_episodes=3)
    head = [ids(sampler.next_batch()) for _ in range(4)]
    resumed = PromptSampler(ROWS, batch_size=3, seed=5, num_episodes=3)
    resumed.load_state_dict(sampler.state_dict())
    assert head + drain(resumed) == full


def test_total_steps_and_bad_batch_size():
    assert PromptSampler(ROWS, batch_size=4, seed=0, num_episodes=3).total_steps == 6
    with pytest.raises(ValueError, match="rollout_batch_size=11"):
        PromptSampler(ROWS, batch_size=11, seed=0)

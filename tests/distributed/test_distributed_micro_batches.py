"""Workers plan micro-batches for the layout that really runs: the padded grid when they pad (no packing, an
attention backend that cannot pack, the reward model), the packed row when they pack."""

from __future__ import annotations

from reasonrl.distributed.ppo_workers import CriticWorker, WorkerConfig, equalised_micro_batches
from reasonrl.models import pad_batch

# Long chains of thought next to short ones: 4 samples, 2 400 real tokens, a padded grid of 4 x (1000 + 1000).
SAMPLES = [([1] * 100, [2] * 1000), ([1] * 1000, [2] * 10), ([1] * 50, [2] * 100), ([1] * 60, [2] * 80)]


def worker(packing: bool, attn: str = "sdpa") -> CriticWorker:
    """``packing=True``: wherever the backend keeps sequences apart (``"on"``), decided as in ``setup``."""
    w = CriticWorker(0, 1)
    w._configure(
        WorkerConfig(
            model_path="unused",
            max_tokens_per_micro_batch=2400,
            packing="on" if packing else "off",
            attn_implementation=attn,
        )
    )
    return w


def test_padded_workers_keep_every_grid_within_the_budget():
    for w in (worker(packing=False), worker(packing=True, attn="paged_attention")):
        planned = w._micro_batches(SAMPLES)
        assert len(planned) == 3
        for _, mb, _ in planned:
            assert pad_batch(mb, 0).input_ids.numel() <= 2400 or len(mb) == 1


def test_packing_workers_count_real_tokens():
    planned = worker(packing=True)._micro_batches(SAMPLES)
    assert [idx for idx, *_ in planned] == [[0, 1, 2, 3]]  # one packed row of exactly 2 400 tokens


def test_reward_model_path_plans_padded_even_when_packing_is_on():
    assert len(worker(packing=True)._micro_batches(SAMPLES, padded=True)) == 3


def test_equalised_micro_batches_without_a_process_group():
    assert equalised_micro_batches([], 100) == []
    assert equalised_micro_batches(SAMPLES, 2400, padded=False) == [[0, 1, 2, 3]]
    assert len(equalised_micro_batches(SAMPLES, 2400, padded=True)) == 3

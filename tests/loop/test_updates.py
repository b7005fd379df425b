"""StepUpdates on fake role handles: the loss settings built once are sent unchanged, and the step's KL-loss and
entropy coefficients come from the controllers alone (one source each)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import torch

from reasonrl.algos.loss_settings import PolicyLossConfig, ValueLossConfig
from reasonrl.dataplane.experience import Experience
from reasonrl.dataplane.sharding import rank_shards
from reasonrl.loop.updates import StepUpdates, UpdateSettings


class FakeRole:
    """What StepUpdates uses of a PolicyHandle / CriticHandle; records every update's arguments."""

    def __init__(self, world_size: int = 2):
        self.world_size = world_size
        self.sent: list[int] = []
        self.updates: list[tuple] = []

    def shard(self, exp, *, with_fields):
        return rank_shards(exp, self.world_size, with_fields=with_fields)

    async def send_step_data(self, shards, step):
        self.sent.append(step)

    async def update(self, mini_batch, step, loss, coefs=None):
        self.updates.append((mini_batch, step, loss, coefs))
        n = sum(len(p) for p in mini_batch.positions)
        return [{"loss_share": 0.5, "tokens": n, "entropy": 1.5, "grad_norm": 1.0, "lr": 1e-6}] * self.world_size


def settings(**kw) -> UpdateSettings:
    base = dict(
        seed=0,
        shuffle_mini_batches=False,
        colocate_all=False,
        epochs={"policy": 1, "critic": 1},
        bounds={"policy": [(0, 2), (2, 4)], "critic": [(0, 4)]},
        policy_loss=PolicyLossConfig(kl_estimator="k2"),
        value_loss=ValueLossConfig(clip_eps=0.5),
        kl_in_loss=True,
        entropy_coef=0.003,
    )
    return UpdateSettings(**(base | kw))


def experience() -> Experience:
    samples = [([1], [2, 3]), ([4], [5]), ([6], [7, 8]), ([9], [10])]
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [1, 0]], dtype=torch.bool)
    return Experience(samples, mask, advantages=torch.ones(4, 2))


def test_settings_are_sent_unchanged_and_the_kl_coefficient_is_the_controllers():
    policy, critic = FakeRole(), FakeRole()
    s = settings()
    updates = StepUpdates(policy, critic, s)
    asyncio.run(updates.run(experience(), 0, kl_coef=0.02))
    asyncio.run(updates.run(experience(), 1, kl_coef=0.05))  # an adaptive controller moved
    assert policy.sent == critic.sent == [0, 1]
    assert all(loss is s.policy_loss for _, _, loss, _ in policy.updates)  # built once, never patched
    assert [coefs.kl_loss_coef for *_, coefs in policy.updates] == [0.02, 0.02, 0.05, 0.05]
    assert {coefs.entropy_coef for *_, coefs in policy.updates} == {0.003}  # no controller: the config's
    assert all(loss is s.value_loss and coefs is None for _, _, loss, coefs in critic.updates)
    # ranks hold samples [0, 1] and [2, 3]; mini-batch k is each rank's k-th: samples 0, 2 then 1, 3
    assert [mb.global_tokens for mb, *_ in policy.updates[:2]] == [4, 2]  # their loss tokens, over every rank


def test_no_kl_loss_outside_kl_mode_loss_and_the_entropy_controllers_coefficient():
    policy = FakeRole()
    controller = SimpleNamespace(effective_coef=0.01, update=lambda entropy: setattr(controller, "effective_coef", 0.2))
    updates = StepUpdates(policy, None, settings(kl_in_loss=False), entropy_ctl=controller)
    out = asyncio.run(updates.run(experience(), 0, kl_coef=0.02))
    assert {(c.kl_loss_coef, c.entropy_coef) for *_, c in policy.updates} == {(0.0, 0.01)}
    assert out["entropy/coef"] == 0.2  # updated after the step, used from the next one
    assert updates.step_coefs(0.02).entropy_coef == 0.2

"""The role handles' logic, on fake worker groups and engine actors (no Ray): what each typed method sends to
which rank, in which order, and what it makes of the answers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch

from reasonrl.algos.loss_settings import PolicyLossConfig, PolicyStepCoefs, ValueLossConfig
from reasonrl.dataplane.experience import Experience
from reasonrl.distributed.handles import (
    CriticHandle,
    EngineHandle,
    MiniBatch,
    PolicyHandle,
    RefHandle,
    RewardModelHandle,
    RoleHandles,
)


class FakeGroup:
    """A WorkerGroup's driver-side API; each rank answers ``answer(method, rank, payload, *args)``."""

    def __init__(self, world_size: int, answer, name: str = "fake"):
        self.name, self.world_size, self.answer = name, world_size, answer
        self.calls: list[tuple] = []

    def call_sharded_async(self, method, shards, *args):
        assert len(shards) == self.world_size
        shards = [_resolved(shard) for shard in shards]
        self.calls.append((method, list(shards), args))
        return [self._reply(method, rank, shard, *args) for rank, shard in enumerate(shards)]

    def call_async(self, method, *args):
        self.calls.append((method, None, args))
        return [self._reply(method, rank, None, *args) for rank in range(self.world_size)]

    async def _reply(self, method, rank, payload, *args):
        return self.answer(method, rank, payload, *args)


def _resolved(payload):
    """What a Ray actor receives for an object-store ref passed as an argument: the object. ``put_per_rank`` puts
    the shards in the object store whenever Ray runs in this process (another test's cluster, same pytest worker)."""
    if type(payload).__name__ == "ObjectRef":
        import ray

        return ray.get(payload)
    return payload


def experience() -> Experience:
    samples = [([1], [2, 3, 4]), ([5, 6], [7]), ([8], [9, 10]), ([11], [12, 13, 14])]
    lengths = torch.tensor([len(r) for _, r in samples])
    mask = torch.arange(3)[None, :] < lengths[:, None]
    return Experience(samples, mask, old_logprobs=-torch.arange(12.0).view(4, 3) * mask)


def test_forwards_stitch_each_ranks_flat_output_into_batch_order():
    """Each rank answers from the RaggedShard it got (here: minus each response token id); the handle puts the
    answers back at their samples' rows."""
    exp = experience()
    truth = torch.tensor([[-float(t) for t in r] + [0.0] * (3 - len(r)) for _, r in exp.samples])

    def answer(method, rank, shard, *args):
        flat = torch.tensor([-float(t) for _, r in shard.samples for t in r])
        return (flat, None) if method == "ragged_logprobs" and args == (0.7,) else flat  # the policy's is a pair

    policy, ref, critic = (handle(FakeGroup(2, answer)) for handle in (PolicyHandle, RefHandle, CriticHandle))
    shards = policy.shard(exp, with_fields=False)  # cut once, shared by the roles of that world size
    assert torch.equal(asyncio.run(policy.logprobs(shards, 0.7)), truth)
    assert torch.equal(asyncio.run(ref.logprobs(shards, 1.0)), truth)
    assert torch.equal(asyncio.run(critic.values(shards)), truth)
    assert policy.group.calls[0][0] == "ragged_logprobs" and policy.group.calls[0][2] == (0.7,)
    assert critic.group.calls[0][0] == "ragged_values" and critic.group.calls[0][2] == ()
    assert torch.equal(asyncio.run(policy.ref_logprobs(shards, 1.0)), truth)
    assert policy.group.calls[-1][0] == "ragged_ref_logprobs"


def test_handles_refuse_data_cut_for_another_world_size():
    exp = experience()
    policy = PolicyHandle(FakeGroup(2, lambda *a: None))
    three = PolicyHandle(FakeGroup(3, lambda *a: None)).shard(exp, with_fields=False)
    with pytest.raises(ValueError, match="data for 3 ranks, the role has 2"):
        asyncio.run(policy.logprobs(three, 1.0))
    with pytest.raises(ValueError, match="data for 1 ranks, the role has 2"):
        asyncio.run(policy.update(MiniBatch([[0]], 1, 1), 0, PolicyLossConfig(), PolicyStepCoefs()))
    assert policy.group.calls == []  # nothing was sent


def test_step_data_is_checked_and_updates_send_settings_counts_and_coefficients():
    exp = experience()
    kept = {"n": None}

    def answer(method, rank, payload, *args):
        if method == "set_step_data":
            return kept["n"] if kept["n"] is not None else len(payload)
        return {"rank": rank, "args": args, "positions": payload}

    policy, critic = PolicyHandle(FakeGroup(2, answer)), CriticHandle(FakeGroup(2, answer))
    shards = policy.shard(exp, with_fields=True)
    asyncio.run(policy.send_step_data(shards, 5))
    assert policy.group.calls[-1][0] == "set_step_data" and policy.group.calls[-1][2] == (5,)
    kept["n"] = 0  # a rank that lost its shard
    with pytest.raises(RuntimeError, match="kept \\[0, 0\\] samples of step 6, sent \\[2, 2\\]"):
        asyncio.run(critic.send_step_data(shards, 6))

    loss, coefs = PolicyLossConfig(clip_high=0.28), PolicyStepCoefs(kl_loss_coef=0.01, entropy_coef=0.002)
    mb = MiniBatch([[1], [0, 1]], global_tokens=7, global_seqs=3)
    out = asyncio.run(policy.update(mb, 5, loss, coefs))
    assert [o["positions"] for o in out] == [[1], [0, 1]]
    assert out[0]["args"] == (5, loss, 7, 3, coefs)  # update_mini_batch(positions, step, loss, tokens, seqs, coefs)
    value = ValueLossConfig(clip_eps=None)
    out = asyncio.run(critic.update(mb, 5, value))
    assert out[1]["args"] == (5, value, 7, 3)  # the value loss has no per-step coefficients


def test_checkpoints_and_exports_go_to_every_rank():
    policy = PolicyHandle(FakeGroup(2, lambda *a: "ok"))
    asyncio.run(policy.save_checkpoint("/ckpt/policy", "ds"))
    asyncio.run(policy.load_checkpoint("/ckpt/policy", "ds"))
    asyncio.run(policy.export_hf("/ckpt/policy_hf"))
    asyncio.run(policy.export_adapter("/ckpt/policy_adapter"))
    assert [(m, a) for m, _, a in policy.group.calls] == [
        ("save_checkpoint", ("/ckpt/policy", "ds")),
        ("load_checkpoint", ("/ckpt/policy", "ds")),
        ("export_hf", ("/ckpt/policy_hf",)),
        ("export_adapter", ("/ckpt/policy_adapter",)),
    ]


def test_reward_model_scores_split_evenly_and_concatenate():
    group = FakeGroup(2, lambda m, r, samples: torch.tensor([float(len(p)) for p, _ in samples]))
    samples = [([1], [2]), ([1, 2], [3]), ([1, 2, 3], [4])]
    assert asyncio.run(RewardModelHandle(group).scores(samples)).tolist() == [1.0, 2.0, 3.0]
    assert [len(part) for part in group.calls[0][1]] == [2, 1]


def test_role_handles_from_groups_leave_disabled_roles_out():
    handles = RoleHandles.from_groups(FakeGroup(1, None), critic=FakeGroup(1, None))
    assert isinstance(handles.policy, PolicyHandle) and isinstance(handles.critic, CriticHandle)
    assert handles.ref is None and handles.reward_model is None


def test_engine_handle_launches_at_once_and_reads_streams_part_by_part():
    launched = []

    async def part(n):
        return [f"completion {n}"]

    async def stream(*args):
        for n in range(2):
            yield part(n)  # the ref generator yields refs; each is awaited for its part

    actor = SimpleNamespace(
        generate=SimpleNamespace(remote=lambda *args: launched.append(("generate", args)) or part(9)),
        generate_stream=SimpleNamespace(
            options=lambda num_returns: SimpleNamespace(
                remote=lambda *args: launched.append(("stream", num_returns, args)) or stream(*args)
            )
        ),
        ready=SimpleNamespace(remote=lambda: part("ready")),
    )
    engine = EngineHandle(actor)
    text = engine.generate([[1, 2]], "sampling")
    vision = engine.generate([[1, 2]], "sampling", [["image"]])
    streamed = engine.generate_stream([[3]], "sampling")
    assert launched == [  # launched when called, before anything is awaited; images only for a VLM
        ("generate", ([[1, 2]], "sampling")),
        ("generate", ([[1, 2]], "sampling", [["image"]])),
        ("stream", "streaming", ([[3]], "sampling")),
    ]

    async def read():
        parts = [p async for p in streamed]
        return await text, await vision, parts, await engine.ready()

    assert asyncio.run(read()) == (
        ["completion 9"],
        ["completion 9"],
        [["completion 0"], ["completion 1"]],
        ["completion ready"],
    )

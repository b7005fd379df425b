"""Typed handles of the roles: what the loop calls, instead of method names and positional arguments.

Each handle wraps one role's :class:`~reasonrl.distributed.worker_group.WorkerGroup` (the trainer builds them from
its ``Roles``; the weight syncers and the phase machine keep using the groups and the engine actors directly):

=====================  ========================================================================================
``PolicyHandle``       ``logprobs(shards, temperature)``, ``ref_logprobs(shards, temperature)`` (the frozen copy
                       each rank holds under ``reference_process=policy``, else LoRA: adapter off),
                       ``send_step_data(shards, step)``, ``update(mini_batch, step, loss, coefs)``,
                       ``save_checkpoint`` / ``load_checkpoint``, ``export_hf``, ``export_adapter``
``CriticHandle``       ``values(shards)``, ``send_step_data``, ``update(mini_batch, step, loss)``, checkpoints
``RefHandle``          ``logprobs(shards, temperature)`` (the reference, and the distillation teacher: a group of the
                       same worker class loaded from ``teacher_pretrain``)
``RewardModelHandle``  ``scores(samples)``
``EngineHandle``       one vLLM engine: ``generate``, ``generate_stream``, ``pump``, ``abort_pumped``, ``ready``
=====================  ========================================================================================

What crosses the boundary: a step's samples as :class:`~reasonrl.dataplane.sharding.RankShards` (cut and put in the
object store once per world size by :meth:`RoleHandle.shard`, shared by the roles of that size; the forwards come
back stitched into ``[batch, T]`` tensors), a :class:`MiniBatch` (positions in each rank's shard of the step and
the global counts that normalise the loss), the run's loss settings (``reasonrl.algos.loss_settings``, built once)
and the step's :class:`~reasonrl.algos.loss_settings.PolicyStepCoefs`. Forward and update methods are collective
(ZeRO-3): every call goes to every rank before anything is awaited, and one role's calls are issued in the order
the loop makes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

import torch

from reasonrl.algos.loss_settings import PolicyLossConfig, PolicyStepCoefs, ValueLossConfig
from reasonrl.dataplane.completion import Completion
from reasonrl.dataplane.experience import Experience, Sample
from reasonrl.dataplane.sharding import RankShards, rank_shards
from reasonrl.distributed.worker_group import gather_all, put_per_rank
from reasonrl.utils.even_split import even_parts


@dataclasses.dataclass(frozen=True)
class MiniBatch:
    """One optimizer step of a role: ``positions[r]`` are positions in rank ``r``'s shard of the step (what
    ``send_step_data`` sent; possibly none: the rank still takes part in the collective step); ``global_tokens``
    / ``global_seqs`` count the loss tokens and the sequences with one over every rank (the loss's normalisers)."""

    positions: list[list[int]]
    global_tokens: int
    global_seqs: int


class RoleHandle:
    """What every role's handle shares: its group, its world size, and sharding for it."""

    def __init__(self, group):
        self.group = group

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def world_size(self) -> int:
        return self.group.world_size

    def shard(self, exp: Experience, *, with_fields: bool) -> RankShards:
        """``exp`` cut over this role's ranks, each rank's ``RaggedShard`` put in the object store once (token ids
        only for the forwards; ``with_fields``: every per-token field too, for the updates). Any role of the same
        world size can take the result."""
        return rank_shards(exp, self.world_size, with_fields=with_fields, put=put_per_rank)

    def _check(self, shards: RankShards | MiniBatch) -> None:
        ranks = shards.world_size if isinstance(shards, RankShards) else len(shards.positions)
        if ranks != self.world_size:
            raise ValueError(f"{self.name}: data for {ranks} ranks, the role has {self.world_size}")

    async def _sharded(self, method: str, shards: RankShards, *args) -> list:
        self._check(shards)
        return await gather_all(self.group.call_sharded_async(method, shards.payloads, *args))

    async def _forward(self, method: str, shards: RankShards, *args) -> torch.Tensor:
        """A collective forward: each rank's flat per-response-token output, stitched into ``[batch, T]``."""
        parts = await self._sharded(method, shards, *args)
        return shards.stitch([p[0] if isinstance(p, tuple) else p for p in parts])

    async def _on_all(self, method: str, *args) -> list:
        return await gather_all(self.group.call_async(method, *args))


class TrainedRoleHandle(RoleHandle):
    """A role with an optimizer (policy, critic): the step's data, kept by each rank, and checkpoints."""

    async def send_step_data(self, shards: RankShards, step: int) -> None:
        """Each rank keeps its shard of step ``step`` (``shard(exp, with_fields=True)``) for the step's mini-batches:
        the samples travel once per step, each :meth:`update` names only positions in them."""
        kept = await self._sharded("set_step_data", shards, step)
        if kept != shards.sizes():
            raise RuntimeError(f"{self.name}: the ranks kept {kept} samples of step {step}, sent {shards.sizes()}")

    async def _update(self, mini_batch: MiniBatch, step: int, loss, coefs=None) -> list[dict[str, float]]:
        self._check(mini_batch)
        counts = (mini_batch.global_tokens, mini_batch.global_seqs)
        per_step = () if coefs is None else (coefs,)
        refs = self.group.call_sharded_async("update_mini_batch", mini_batch.positions, step, loss, *counts, *per_step)
        return await gather_all(refs)

    async def save_checkpoint(self, ckpt_dir: str, tag: str) -> None:
        """Every rank's DeepSpeed state (model, optimizer, scheduler) under ``ckpt_dir/tag``."""
        await self._on_all("save_checkpoint", ckpt_dir, tag)

    async def load_checkpoint(self, ckpt_dir: str, tag: str) -> None:
        await self._on_all("load_checkpoint", ckpt_dir, tag)


class PolicyHandle(TrainedRoleHandle):
    """The policy's ranks (``PolicyWorker``)."""

    async def logprobs(self, shards: RankShards, temperature: float) -> torch.Tensor:
        """Log-probs of the sampled tokens under the current weights, ``[batch, T]`` (zeros at padding)."""
        return await self._forward("ragged_logprobs", shards, temperature)

    async def ref_logprobs(self, shards: RankShards, temperature: float) -> torch.Tensor:
        """The reference's log-probs computed by the policy's ranks: from the frozen copy each holds
        (``reference_process=policy``), or the policy with its LoRA adapter switched off."""
        return await self._forward("ragged_ref_logprobs", shards, temperature)

    async def update(
        self, mini_batch: MiniBatch, step: int, loss: PolicyLossConfig, coefs: PolicyStepCoefs
    ) -> list[dict[str, float]]:
        """One optimizer step over ``mini_batch`` of step ``step``; each rank's metrics (token-weighted means,
        ``tokens``, ``loss_share``, ``grad_norm``, ``lr``)."""
        return await self._update(mini_batch, step, loss, coefs)

    async def export_hf(self, out_dir: str) -> None:
        """The model in Hugging Face format (rank 0 writes)."""
        await self._on_all("export_hf", out_dir)

    async def export_adapter(self, out_dir: str) -> None:
        """The LoRA adapter alone, in PEFT's format (rank 0 writes)."""
        await self._on_all("export_adapter", out_dir)


class CriticHandle(TrainedRoleHandle):
    """The critic's ranks (``CriticWorker``)."""

    async def values(self, shards: RankShards) -> torch.Tensor:
        """The value of every response token, ``[batch, T]`` (zeros at padding)."""
        return await self._forward("ragged_values", shards)

    async def update(self, mini_batch: MiniBatch, step: int, loss: ValueLossConfig) -> list[dict[str, float]]:
        """One optimizer step of the value loss over ``mini_batch`` of step ``step``; each rank's metrics."""
        return await self._update(mini_batch, step, loss)


class RefHandle(RoleHandle):
    """The frozen reference model's ranks (``ReferenceWorker``); also the distillation teacher's, a group of the
    same class loaded from ``teacher_pretrain``."""

    async def logprobs(self, shards: RankShards, temperature: float) -> torch.Tensor:
        """Log-probs of the sampled tokens under the reference, ``[batch, T]`` (zeros at padding)."""
        return await self._forward("ragged_logprobs", shards, temperature)


class RewardModelHandle(RoleHandle):
    """The learned reward model's ranks (``RewardModelWorker``)."""

    async def scores(self, samples: Sequence[Sample]) -> torch.Tensor:
        """One float score per ``(prompt ids, response ids)`` sample, ``[batch]``, in its own vocabulary."""
        parts = await gather_all(self.group.call_sharded_async("score", even_parts(samples, self.world_size)))
        return torch.cat([p.float() for p in parts])


class EngineHandle:
    """One vLLM engine actor (``VLLMEngine``), as the loop's rollouts use it. Each method launches its call at
    once (calls run in the order they are made) and returns what to await.

    Weight loading is the weight syncers' (``weight_sync.WeightSyncer``, ``adapter_sync.AdapterSyncer``), which
    keep the actor calls of their protocol; sleeping and waking are the phase machine's (``phases.PhaseMachine``).

    Pausing mid-generation (``fully_async``, docs/async.md): the ``flow_*`` calls keep requests in the engine
    across weight syncs. ``flow_step`` adds requests and steps the engine for a slice; between two calls no engine
    step runs on an in-process engine (``flow_pause`` pauses a multiprocess engine core's scheduler, keeping its
    requests and KV cache), so a sync loads the new weights between engine steps, and ``flow_set_version`` then
    tags every later token with the new version and keeps or recomputes the requests in flight. Every completion
    of the flow carries ``token_versions``.
    """

    def __init__(self, actor):
        self.actor = actor

    def generate(
        self, prompt_ids: Sequence[Sequence[int]], sampling, images=None, prompt_max_tokens=None
    ) -> Awaitable[list[Completion]]:
        """``sampling.n`` completions per prompt (a ``vllm_engine.SamplingConfig``), all at once when done.
        ``images``: each prompt's images (a vision-language model); ``prompt_max_tokens``: each prompt's own
        response-length cap (rows' ``max_response_tokens``)."""
        args, kwargs = _generate_args(prompt_ids, sampling, images, prompt_max_tokens)
        return self.actor.generate.remote(*args, **kwargs)

    def generate_stream(
        self, prompt_ids: Sequence[Sequence[int]], sampling, images=None, prompt_max_tokens=None
    ) -> AsyncIterator[list[Completion]]:
        """Like :meth:`generate`, each completion as soon as it is finished (in lists)."""
        args, kwargs = _generate_args(prompt_ids, sampling, images, prompt_max_tokens)
        launched = self.actor.generate_stream.options(num_returns="streaming").remote(*args, **kwargs)
        return _each_part(launched)

    def pump(self, requests: Sequence[Any], max_wait_s: float) -> Awaitable[list[tuple[str, Completion]]]:
        """Add multi-turn ``requests`` (``vllm_engine.TurnRequest``) and step the engine for up to ``max_wait_s``:
        the ``(request id, completion)`` of every turn finished, those added earlier included."""
        return self.actor.pump.remote(requests, max_wait_s)

    def abort_pumped(self) -> Awaitable[int]:
        """Abort the turns :meth:`pump` still holds; how many."""
        return self.actor.abort_pumped.remote()

    def ready(self) -> Awaitable[bool]:
        """Answers once every call made before it has run (the actor runs calls in order)."""
        return self.actor.ready.remote()

    # fully asynchronous rollouts (``reasonrl.loop.continuous_rollout``): requests that stay in the engine
    def flow_step(self, requests: Sequence[Any], max_wait_s: float) -> Awaitable[list[tuple[str, Completion]]]:
        """Add ``requests`` (``flow_requests.FlowRequest``) and step for up to ``max_wait_s``: the finished ones."""
        return self.actor.flow_step.remote(list(requests), max_wait_s)

    def flow_pause(self) -> Awaitable[None]:
        """Before a weight sync with requests in flight (a multiprocess engine core: its scheduler paused)."""
        return self.actor.flow_pause.remote()

    def flow_set_version(self, version: int, partial_rollout: str) -> Awaitable[dict[str, int]]:
        """After a weight sync: the engine's weight version, and the requests in flight kept or recomputed."""
        return self.actor.flow_set_version.remote(version, partial_rollout)

    def flow_abort(self) -> Awaitable[int]:
        """Abort every request of the flow (a stop, the end of a run)."""
        return self.actor.flow_abort.remote()


def _generate_args(prompt_ids, sampling, images, prompt_max_tokens=None) -> tuple[tuple, dict]:
    """The engine call's arguments; the optional ones only when given (stand-in engines need not take them)."""
    args = (prompt_ids, sampling) if images is None else (prompt_ids, sampling, images)
    return args, ({} if prompt_max_tokens is None else {"prompt_max_tokens": list(prompt_max_tokens)})


async def _each_part(launched) -> AsyncIterator[list[Completion]]:
    async for ref in launched:
        yield await ref


@dataclasses.dataclass(frozen=True)
class RoleHandles:
    """The handles of one run's roles (``None`` for a disabled role), built from its worker groups."""

    policy: PolicyHandle
    ref: RefHandle | None = None
    critic: CriticHandle | None = None
    reward_model: RewardModelHandle | None = None
    teacher: RefHandle | None = None

    @classmethod
    def from_groups(cls, policy, *, ref=None, critic=None, reward_model=None, teacher=None) -> RoleHandles:
        return cls(
            policy=PolicyHandle(policy),
            ref=None if ref is None else RefHandle(ref),
            teacher=None if teacher is None else RefHandle(teacher),
            critic=None if critic is None else CriticHandle(critic),
            reward_model=None if reward_model is None else RewardModelHandle(reward_model),
        )

"""The updates of a step: :class:`StepUpdates` sends each rank its shard of the step once, then runs the critic's and
the policy's passes over it, mini-batch by mini-batch (:mod:`reasonrl.loop.mini_batches`), and averages what the
ranks report into the step's ``policy/*``, ``critic/*`` and ``perf/tokens_per_s_train_*`` metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from reasonrl.dataplane.experience import Experience
from reasonrl.distributed.worker_group import gather_all
from reasonrl.loop.forward_stream import put_rank_shards
from reasonrl.loop.mini_batches import mini_batch_counts, rank_mini_batches


@dataclasses.dataclass(frozen=True)
class UpdateSettings:
    """The config values the updates read (``from_config``). ``seed`` and ``shuffle_mini_batches`` seed each pass's
    mini-batch order (``rank_mini_batches`` reads them under these names)."""

    seed: int
    shuffle_mini_batches: bool
    colocate_all: bool  # critic and policy share the devices: one update after the other
    epochs: dict[str, int]  # role -> passes over the step
    bounds: dict[str, list[tuple[int, int]]]  # role -> the mini-batch ranges of one pass over the full rollout
    loss: dict[str, Any]  # role -> PolicyLossConfig / ValueLossConfig
    kl_in_loss: bool  # kl_mode == "loss": the policy loss carries the KL controller's current coefficient

    @classmethod
    def from_config(cls, cfg) -> UpdateSettings:
        return cls(
            seed=cfg.seed,
            shuffle_mini_batches=cfg.shuffle_mini_batches,
            colocate_all=cfg.colocate_all,
            epochs={"policy": cfg.policy_epochs, "critic": cfg.critic_epochs},
            bounds={"policy": cfg.mini_batch_bounds("policy"), "critic": cfg.mini_batch_bounds("critic")},
            loss={"policy": cfg.policy_loss_config(), "critic": cfg.value_loss_config()},
            kl_in_loss=cfg.kl_mode == "loss",
        )


class StepUpdates:
    """The critic and policy updates of a step; concurrent when they do not share devices.

    Args:
        policy, critic: the role worker groups (``critic`` None without one).
        settings: the config values the updates read.
        entropy_ctl: the adaptive entropy controller (None when off): its coefficient goes into the policy loss and
            it is updated with each step's entropy.
    """

    def __init__(self, policy, critic, settings: UpdateSettings, entropy_ctl=None):
        self.groups = {"policy": policy} | ({"critic": critic} if critic is not None else {})
        self.settings, self.entropy_ctl = settings, entropy_ctl
        self.spans: dict[str, tuple[float, float]] = {}  # role -> (start, end) of its last update

    async def run(self, exp: Experience, step: int, kl_coef: float) -> dict[str, float]:
        """Every role's update on step ``step``'s experience (0-based: the completed steps); ``kl_coef``: the KL
        controller's current value (fixed or adaptive).

        First each rank of each updated role gets its shard of the whole step once (:meth:`send_step_data`);
        every mini-batch of every pass then sends only the positions of its samples in each rank's shard."""
        shards = await self.send_step_data(exp, step)
        lengths = exp.loss_tokens()  # loss tokens per sample: the response lengths when the loss mask has no holes
        updates = {
            role: self.update_role(role, shards[group.world_size], lengths, step, kl_coef)
            for role, group in self.groups.items()
        }
        if "critic" not in updates:
            return await updates["policy"]
        if self.settings.colocate_all:  # critic and policy share the devices: one after the other
            return (await updates["critic"]) | (await updates["policy"])
        c, p = await asyncio.gather(updates["critic"], updates["policy"])
        return c | p

    async def send_step_data(self, exp: Experience, step: int) -> dict[int, list[list[int]]]:
        """Put each rank's token-balanced :class:`RaggedShard` of the step (token ids + every per-token field) in the
        object store once per world size, shared by the roles of that size, and have each rank cache it for this
        step (``set_step_data``). Returns world size -> the sample indices of each rank's shard."""
        groups = list(self.groups.values())
        shards, refs = {}, {}
        for size in {g.world_size for g in groups}:
            shards[size], refs[size] = put_rank_shards(exp, size, with_fields=True)
        calls = [g.call_sharded_async("set_step_data", refs[g.world_size], step) for g in groups]
        await gather_all([ref for call in calls for ref in call])
        return shards

    async def update_role(
        self, role: str, shards: list[list[int]], lengths: Sequence[int], step: int, kl_coef: float
    ) -> dict[str, float]:
        """``role``'s passes over the step: mini-batch ``k`` is the union of every rank's ``k``-th slice of its
        shard (:func:`rank_mini_batches`); its global token / sequence counts normalise the loss exactly.

        Args:
            shards: the step's sample indices of each rank (what :meth:`send_step_data` sent).
            lengths: loss tokens of each sample of the step (``Experience.loss_tokens``).
        """
        s = self.settings
        group = self.groups[role]
        loss_cfg = s.loss[role]
        if role == "policy" and s.kl_in_loss:
            loss_cfg = dataclasses.replace(loss_cfg, kl_loss_coef=kl_coef)
        if role == "policy" and self.entropy_ctl is not None:
            loss_cfg = dataclasses.replace(loss_cfg, entropy_coef=self.entropy_ctl.effective_coef)
        per_step: list[list[dict]] = []
        start, tokens = time.perf_counter(), 0
        sizes = [len(idx) for idx in shards]
        for epoch in range(s.epochs[role]):
            plan = rank_mini_batches(s, role, step, epoch, sizes, s.bounds[role])
            for per_rank in plan:
                g_tokens, g_seqs = mini_batch_counts(shards, per_rank, lengths)
                refs = group.call_sharded_async("update_mini_batch", per_rank, step, loss_cfg, g_tokens, g_seqs)
                per_step.append(await gather_all(refs))
                tokens += g_tokens
        out = {f"{role}/{k}": v for k, v in mean_metrics(per_step).items() if k not in ("tokens", "loss_share")}
        out[f"{role}/{'value_loss' if role == 'critic' else 'loss'}"] = sum(
            sum(rank["loss_share"] for rank in ranks) for ranks in per_step
        ) / len(per_step)
        out[f"perf/tokens_per_s_train_{role}"] = tokens / max(time.perf_counter() - start, 1e-9)
        self.spans[role] = (start, time.perf_counter())
        if role == "policy" and self.entropy_ctl is not None and "policy/entropy" in out:
            self.entropy_ctl.update(out["policy/entropy"])
            out["entropy/coef"] = self.entropy_ctl.effective_coef
        return out


def mean_metrics(per_step: Sequence[Sequence[dict]]) -> dict[str, float]:
    """Per key: mean over the optimizer steps that report it of the token-weighted mean over the ranks that do.

    A rank with an empty shard reports only grad_norm / lr / tokens; it must not bias the others' means.
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for ranks in per_step:
        for key in {k for r in ranks for k in r}:
            having = [r for r in ranks if key in r]
            if key in ("grad_norm", "lr"):
                value = having[0][key]  # identical on every rank
            else:
                weights = [max(r.get("tokens", 1), 1) for r in having]
                value = sum(r[key] * w for r, w in zip(having, weights, strict=True)) / sum(weights)
            sums[key] = sums.get(key, 0.0) + value
            counts[key] = counts.get(key, 0) + 1
    return {key: sums[key] / counts[key] for key in sums}

"""The updates of a step: :class:`StepUpdates` sends each rank its shard of the step once, then runs the critic's and
the policy's passes over it, mini-batch by mini-batch (:mod:`reasonrl.loop.mini_batches`), and averages what the
ranks report into the step's ``policy/*``, ``critic/*`` and ``perf/tokens_per_s_train_*`` metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence

from reasonrl.algos.loss_settings import PolicyLossConfig, PolicyStepCoefs, ValueLossConfig
from reasonrl.dataplane.experience import Experience
from reasonrl.dataplane.sharding import RankShards
from reasonrl.distributed.handles import CriticHandle, MiniBatch, PolicyHandle
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
    policy_loss: PolicyLossConfig  # the losses' settings, built once per run
    value_loss: ValueLossConfig
    kl_in_loss: bool  # kl_mode == "loss": the policy loss carries the KL controller's current coefficient
    entropy_coef: float  # the entropy bonus when no adaptive controller sets it

    @classmethod
    def from_config(cls, cfg) -> UpdateSettings:
        return cls(
            seed=cfg.seed,
            shuffle_mini_batches=cfg.shuffle_mini_batches,
            colocate_all=cfg.colocate_all,
            epochs={"policy": cfg.policy_epochs, "critic": cfg.critic_epochs},
            bounds={"policy": cfg.mini_batch_bounds("policy"), "critic": cfg.mini_batch_bounds("critic")},
            policy_loss=cfg.policy_loss_config(),
            value_loss=cfg.value_loss_config(),
            kl_in_loss=cfg.kl_mode == "loss",
            entropy_coef=cfg.entropy_coef,
        )


class StepUpdates:
    """The critic and policy updates of a step; concurrent when they do not share devices.

    Args:
        policy, critic: the roles' handles (``critic`` None without one).
        settings: the config values the updates read.
        entropy_ctl: the adaptive entropy controller (None when off): its coefficient goes into the policy loss and
            it is updated with each step's entropy.
    """

    def __init__(self, policy: PolicyHandle, critic: CriticHandle | None, settings: UpdateSettings, entropy_ctl=None):
        self.policy, self.critic = policy, critic
        self.roles: dict[str, PolicyHandle | CriticHandle] = {"policy": policy}
        if critic is not None:
            self.roles["critic"] = critic
        self.settings, self.entropy_ctl = settings, entropy_ctl
        self.spans: dict[str, tuple[float, float]] = {}  # role -> (start, end) of its last update

    async def run(self, exp: Experience, step: int, kl_coef: float) -> dict[str, float]:
        """Every role's update on step ``step``'s experience (0-based: the completed steps); ``kl_coef``: the KL
        controller's current value (fixed or adaptive).

        First each rank of each updated role gets its shard of the whole step once (:meth:`send_step_data`);
        every mini-batch of every pass then sends only the positions of its samples in each rank's shard."""
        shards = await self.send_step_data(exp, step)
        lengths = exp.loss_tokens()  # loss tokens per sample: the response lengths when the loss mask has no holes
        coefs = self.step_coefs(kl_coef)
        updates = {
            role: self.update_role(role, shards[handle.world_size], lengths, step, coefs)
            for role, handle in self.roles.items()
        }
        if "critic" not in updates:
            return await updates["policy"]
        if self.settings.colocate_all:  # critic and policy share the devices: one after the other
            return (await updates["critic"]) | (await updates["policy"])
        c, p = await asyncio.gather(updates["critic"], updates["policy"])
        return c | p

    async def send_step_data(self, exp: Experience, step: int) -> dict[int, RankShards]:
        """Cut the step into each rank's token-balanced shard (token ids + every per-token field), put in the
        object store once per world size and shared by the roles of that size, and have each rank keep it for this
        step (``send_step_data``). Returns world size -> the shards sent."""
        shards: dict[int, RankShards] = {}
        for handle in self.roles.values():
            if handle.world_size not in shards:
                shards[handle.world_size] = handle.shard(exp, with_fields=True)
        await asyncio.gather(*(h.send_step_data(shards[h.world_size], step) for h in self.roles.values()))
        return shards

    def step_coefs(self, kl_coef: float) -> PolicyStepCoefs:
        """The policy loss's coefficients of this step: the KL controller's value under ``kl_mode='loss'`` (else
        none), the adaptive entropy controller's coefficient (else the config's fixed one)."""
        entropy = self.entropy_ctl.effective_coef if self.entropy_ctl is not None else self.settings.entropy_coef
        return PolicyStepCoefs(kl_loss_coef=kl_coef if self.settings.kl_in_loss else 0.0, entropy_coef=entropy)

    async def update_role(
        self, role: str, shards: RankShards, lengths: Sequence[int], step: int, coefs: PolicyStepCoefs
    ) -> dict[str, float]:
        """``role``'s passes over the step: mini-batch ``k`` is the union of every rank's ``k``-th slice of its
        shard (:func:`rank_mini_batches`); its global token / sequence counts normalise the loss exactly.

        Args:
            shards: the step's shards of the role's ranks (what :meth:`send_step_data` sent).
            lengths: loss tokens of each sample of the step (``Experience.loss_tokens``).
            coefs: the policy loss's coefficients of this step (:meth:`step_coefs`).
        """
        s = self.settings
        per_step: list[list[dict]] = []
        start, tokens = time.perf_counter(), 0
        for epoch in range(s.epochs[role]):
            plan = rank_mini_batches(s, role, step, epoch, shards.sizes(), s.bounds[role])
            for per_rank in plan:
                g_tokens, g_seqs = mini_batch_counts(shards.indices, per_rank, lengths)
                mini_batch = MiniBatch(per_rank, g_tokens, g_seqs)
                if role == "policy":
                    per_step.append(await self.policy.update(mini_batch, step, s.policy_loss, coefs))
                else:
                    per_step.append(await self.critic.update(mini_batch, step, s.value_loss))
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

"""The asyncio PPO loop: it owns ordering and timing; the workers compute and ``reasonrl.algos`` holds the math.

One step::

    prompts  --> rollout (reasonrl.loop.rollout: generate on all vLLM engines, final reward = rule/user reward +
                 learned reward model, dynamic sampling refills, ReMax greedy baseline)
             --> reference log-probs | critic values | policy log-probs   (concurrently; chunk by chunk,
                 started while the engines generate under split placement: reasonrl.loop.forward_stream)
             --> advantages (reasonrl.loop.learning_signal; warns when there is no signal)
             --> critic update || policy update   (concurrently unless colocated)
             --> weight sync policy -> vLLM (verified) --> eval / checkpoint / log

Generation seeds derive from (seed, step, engine), data order from (seed, episode): a run is reproducible and a
resumed run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from loguru import logger

from reasonrl import algos
from reasonrl.data.sampler import PromptSampler
from reasonrl.dataplane.completion import Completion
from reasonrl.dataplane.experience import Experience
from reasonrl.distributed.phases import Phase, PhaseMachine
from reasonrl.distributed.weight_sync import WeightSyncer, resolve_transport, resolve_verify_source
from reasonrl.distributed.worker_group import gather_all
from reasonrl.loop.forward_stream import ForwardsMixin, covered_seconds, put_rank_shards
from reasonrl.loop.learning_signal import NoSignalMonitor, no_signal_reason, step_advantages
from reasonrl.loop.mini_batches import mini_batch_counts, rank_mini_batches
from reasonrl.loop.rollout import Rollout, RolloutMixin, sample_records
from reasonrl.loop.rollout_ahead import RolloutAhead


@dataclasses.dataclass
class Roles:
    """The running actors of one experiment (``None`` for a disabled role)."""

    policy: Any
    engines: list
    ref: Any = None
    critic: Any = None
    reward_model: Any = None


# A scorer turns completions (+ their data rows) into objects with .reward/.correct/.reason (RewardResult).
Scorer = Callable[[Sequence[Completion], Sequence[dict]], list]


class PPOTrainer(RolloutMixin, ForwardsMixin):
    def __init__(
        self,
        cfg,
        roles: Roles,
        *,
        tokenizer,
        template,
        train_rows: Sequence[dict],
        eval_sets: dict[str, Sequence[dict]],
        scorer: Scorer,
        tracker,
        checkpoints,
        reward_model_encoder: Callable | None = None,
    ):
        """``reward_model_encoder`` maps policy ``(prompt_ids, response_ids)`` samples to the reward model's
        vocabulary (``reasonrl.models.reward_inputs``); None when both share the tokenizer."""
        self.cfg, self.roles, self.tokenizer, self.template = cfg, roles, tokenizer, template
        self.reward_model_encoder = reward_model_encoder
        self.no_signal = NoSignalMonitor()
        self.update_spans: dict[str, tuple[float, float]] = {}  # role -> (start, end) of its last update
        self.eval_sets, self.scorer, self.tracker, self.checkpoints = eval_sets, scorer, tracker, checkpoints
        self.sampler = PromptSampler(train_rows, cfg.rollout_batch_size, cfg.seed, cfg.num_episodes)
        self.total_steps = min(self.sampler.total_steps, cfg.max_steps or self.sampler.total_steps)
        self.global_step = 0
        self.kl_ctl = algos.get_kl_controller(cfg.kl_controller, cfg.init_kl_coef, cfg.kl_target, cfg.kl_horizon)
        self.entropy_ctl = (
            algos.AdaptiveEntropyController(
                target_entropy=cfg.entropy_target,
                init_coef=cfg.entropy_coef,
                delta=cfg.entropy_coef_delta,
                min_coef=cfg.entropy_coef_min,
                max_coef=cfg.entropy_coef_max,
            )
            if cfg.adaptive_entropy
            else None
        )
        # async_staleness = k > 0: the rollouts of the next k steps are generated while this one trains
        self.ahead = (
            RolloutAhead(cfg.async_staleness, self.rollout, self.sampler, self.total_steps)
            if cfg.async_staleness
            else None
        )
        self.probe_ids: list[int] | None = None
        self._weight_syncer: WeightSyncer | None = None
        # colocate_all: what is resident on the shared devices (a no-op machine under split placement)
        groups = {"policy": roles.policy, "critic": roles.critic, "ref": roles.ref, "reward_model": roles.reward_model}
        self.phases = PhaseMachine(
            roles.engines,
            {name: g for name, g in groups.items() if g is not None},
            active=cfg.colocate_all,
        )
        self.stop = None  # a reasonrl.utils.interrupt.StopSignals while a signal may ask the run to stop

    # ================================================================== the loop
    async def fit(self) -> dict[str, float]:
        cfg = self.cfg
        self.tracker.set_phase("sync")  # the bar's postfix says what the step is doing (cheap: no-op without a bar)
        await self.sync_for_generation()  # engines start from the policy's (possibly resumed) weights
        if cfg.eval_before_training and self.global_step == 0 and self.eval_sets:
            self.tracker.set_phase("eval")
            self.tracker.log_metrics(0, await self.evaluate())
        last: dict[str, float] = {}
        saved_at = evaluated_at = None
        while self.global_step < self.total_steps and not self.stop_requested():
            step_start = time.perf_counter()
            self.tracker.set_phase("step")  # generate -> forward -> update -> sync
            sampler_state = self.sampler_resume_state()
            try:
                metrics = await self.train_step()
            except _StepAbandoned as where:
                await self.drop_rollouts_ahead()
                self.sampler.load_state_dict(sampler_state)  # the abandoned step's prompts come again on resume
                logger.warning(f"stop requested during {where}: step {self.global_step + 1} abandoned, nothing kept")
                break
            except BaseException:
                await self.drop_rollouts_ahead()
                raise
            if metrics is None:  # data used up early (dynamic-sampling refills draw from the same sampler)
                logger.warning(f"training data exhausted after step {self.global_step} of {self.total_steps}")
                break
            self.global_step += 1
            final = self.global_step == self.total_steps
            if self.eval_sets and (final or (cfg.eval_interval and self.global_step % cfg.eval_interval == 0)):
                self.tracker.set_phase("eval")
                metrics |= await self.timed_phase(metrics, "eval", self.evaluate())
                evaluated_at = self.global_step
            metrics["time/step"] = time.perf_counter() - step_start
            # Log the step before its checkpoint commits: a resumed run drops rows after the checkpoint's step.
            if self.global_step % cfg.log_interval == 0 or final:
                self.tracker.log_metrics(self.global_step, metrics)
            if self._should_save():
                self.tracker.set_phase("checkpoint")
                await self._timed_save()
                saved_at = self.global_step
            self.tracker.advance(self.global_step, {"reward": metrics.get("reward/mean", float("nan"))})
            last = metrics
        await self.drop_rollouts_ahead()  # a stop, or data used up: nothing generated ahead is trained on
        if self.stop_requested():
            await self.stop_now()
        if self.global_step > 0 and self.global_step != evaluated_at and self.eval_sets:
            self.tracker.set_phase("eval")
            self.tracker.log_metrics(self.global_step, await self.evaluate())
        if (
            self.global_step > 0
            and self.global_step != saved_at
            and not self.checkpoints.path_for(self.global_step).exists()
        ):
            self.tracker.set_phase("checkpoint")
            await self._timed_save()
        self.tracker.set_phase(None)
        return last

    # ================================================================== stopping on a signal
    def stop_requested(self) -> bool:
        return self.stop is not None and self.stop.requested is not None

    def check_stop(self, where: str) -> None:
        """Between phases of a step that has not changed any state yet: drop the step when a stop was asked."""
        if self.stop_requested():
            raise _StepAbandoned(where)

    async def stop_now(self) -> None:
        """Save when the signal asks for it (SIGTERM: ``save_on_sigterm``, Ctrl-C: ``save_on_interrupt``), then
        raise :class:`reasonrl.utils.interrupt.TrainingInterrupted`."""
        import signal

        from reasonrl.utils.interrupt import TrainingInterrupted

        signum = self.stop.requested
        wanted = self.cfg.save_on_sigterm if signum == signal.SIGTERM else self.cfg.save_on_interrupt
        saved = None
        if wanted and self.global_step > 0:
            saved = self.checkpoints.path_for(self.global_step)
            if not saved.exists():
                await self._timed_save()
        logger.warning(f"stopping after step {self.global_step} on {signal.Signals(signum).name}")
        raise TrainingInterrupted(signum, self.global_step, saved)

    async def _timed_save(self) -> None:
        start = time.perf_counter()
        await self.save_checkpoint()
        self.tracker.log_metrics(self.global_step, {"time/checkpoint": time.perf_counter() - start})

    def _should_save(self) -> bool:
        interval = self.cfg.save_interval
        return (interval and self.global_step % interval == 0) or self.global_step == self.total_steps

    async def timed_phase(self, metrics: dict, name: str, awaitable):
        self.tracker.set_phase(name)  # the progress bar shows what the step is doing
        start = time.perf_counter()
        result = await awaitable
        metrics[f"time/{name}"] = time.perf_counter() - start
        return result

    async def train_step(self) -> dict[str, float] | None:
        m: dict[str, float] = {}
        self.tracker.set_phase("generate")
        # stream_rollout under split placement, synchronous: the forwards start on each full chunk of kept samples
        # while the engines still generate (ahead of time they would run on the weights of an older step)
        streamed = self.cfg.stream_rollout and self.ahead is None and not self.cfg.colocate_all
        forwards = self.forward_chunks(launch_when_full=streamed)
        try:
            batch = await self.next_rollout(m, on_kept=forwards.add if streamed else None)
            generated_at = time.perf_counter()
            if batch is None:
                return None
            self.check_stop("generation")
            if not batch.completions:
                logger.warning(
                    f"step {self.global_step + 1}: no learning signal, dynamic sampling kept no prompt group (every "
                    f"group had zero reward variance in {m.get('sampling/tries', 1):.0f} round(s)); skipping the "
                    "update"
                )
                return m
            await self.phases.enter(Phase.TRAINING)
            exp = await self.timed_phase(m, "forward", self.make_experience(batch.completions, forwards))
        finally:
            await forwards.close()
        m["time/forward_overlapped"] = covered_seconds(forwards.spans, until=generated_at)
        m["perf/forward_chunks"] = float(forwards.num_chunks)
        m["perf/forward_chunks_early"] = float(forwards.launched_early)
        m["policy/old_logprobs_reused"] = float(self.cfg.reuses_current_logprobs)
        self.check_stop("the forward passes")  # past here the step changes state (controllers, weights): finish it
        start = time.perf_counter()
        m |= self.compute_advantages(exp, batch)
        m["time/advantages"] = time.perf_counter() - start
        m |= await self.timed_phase(m, "update", self.update(exp))
        m |= await self.timed_phase(m, "sync", self.sync_for_generation())
        self.dump_generations(batch, step=self.global_step + 1)
        return m

    # ================================================================== rollouts, synchronous or ahead
    async def next_rollout(self, m: dict, on_kept: Callable | None = None) -> Rollout | None:
        """This step's rollout (None: the data is used up). Synchronous (``async_staleness=0``): generated now
        (``on_kept``: see ``RolloutMixin.rollout``). Asynchronous: launched up to ``async_staleness`` steps earlier
        (:class:`RolloutAhead`), and the rollouts of the next steps are launched before this one trains; logs
        ``async/staleness`` (updates between the weights that generated it and the ones that train on it) and
        ``time/wait_rollout``. ``Rollout.policy_version``: the training steps whose weights generated it."""
        if self.ahead is None:
            rows = self.sampler.next_batch()
            if rows is None:
                return None
            batch = await self.rollout(rows, m, on_kept=on_kept)
            batch.policy_version = self.global_step
            return batch
        self.ahead.fill(self.global_step + 1, version=self.global_step)
        taken = await self.ahead.take(self.global_step + 1)
        if taken is None:
            return None
        batch, rollout_metrics, record = taken
        m |= rollout_metrics
        m["async/staleness"] = float(self.global_step - record.version)
        batch.policy_version = record.version
        return batch

    def sampler_resume_state(self) -> dict:
        """The sampler state a resumed run continues from: before the prompts of the oldest rollout not trained yet
        (rollouts generated ahead are dropped, their prompts drawn again)."""
        ahead = self.ahead.resume_state() if self.ahead is not None else None
        return ahead if ahead is not None else self.sampler.state_dict()

    async def drop_rollouts_ahead(self) -> None:
        if self.ahead is not None:
            await self.ahead.drop()

    # ================================================================== device sharing (colocate_all)
    async def sync_for_generation(self) -> dict[str, float]:
        """The verified weight sync, ordered by vLLM's sleep rules (see :mod:`reasonrl.distributed.phases`):

        SYNC (roles offloaded, engine weights awake, KV cache asleep, scheduler paused) -> load every bucket and
        check it exactly (no generation: a paused scheduler would never run it) -> GENERATION (KV cache awake,
        scheduler running) -> the end-to-end probe, which generates. Under split placement only the sync runs."""
        if self.probe_ids is None:  # a fixed real prompt: the trainer and every engine must score it identically
            self.probe_ids = self.encode([self.sampler.rows[0]])[0][:64]
        if self.ahead is not None:  # the engines first finish the rollouts queued before this sync (calls run in
            await gather_all([engine.ready.remote() for engine in self.roles.engines])  # order): no broadcast waits
        syncer = self.weight_syncer()
        await self.phases.enter(Phase.SYNC)
        report = await syncer.load()
        self.phases.synced()
        await self.phases.enter(Phase.GENERATION)
        await syncer.verify(self.probe_ids, report)
        return report.as_metrics()

    # ================================================================== experience
    def compute_advantages(self, exp: Experience, batch: Rollout) -> dict[str, float]:
        """Advantages (``reasonrl.loop.learning_signal.step_advantages``), the KL controller's update, and a warning
        when the step carries no learning signal."""
        rewards = torch.tensor([float(r.reward) for r in batch.results])
        out = step_advantages(
            self.cfg,
            rewards=rewards,
            action_mask=exp.action_mask,
            old_logprobs=exp.old_logprobs,
            ref_logprobs=exp.ref_logprobs,
            values=exp.old_values,
            group_ids=batch.group_ids,
            baseline_rewards=None if batch.baselines is None else torch.tensor(batch.baselines),
            kl_coef=self.kl_ctl.value,
        )
        exp.advantages, exp.returns = out.advantages, out.returns
        m = out.metrics
        if out.kl is not None:
            self.kl_ctl.update(out.kl, len(exp))
            m["kl/coef"] = self.kl_ctl.value
        self.no_signal.check(
            self.global_step + 1,
            exp.advantages,
            exp.action_mask,
            reason=lambda: no_signal_reason(self.cfg, rewards, batch.group_ids),
        )
        return m

    # ================================================================== updates
    async def update(self, exp: Experience) -> dict[str, float]:
        """Critic and policy updates; concurrent when they do not share devices.

        First each rank of each updated role gets its shard of the whole step once (:meth:`send_step_data`);
        every mini-batch of every pass then sends only the positions of its samples in each rank's shard."""
        groups = {"policy": self.roles.policy}
        if self.roles.critic is not None:
            groups["critic"] = self.roles.critic
        shards = await self.send_step_data(exp, list(groups.values()))
        lengths = exp.loss_tokens()  # loss tokens per sample: the response lengths when the loss mask has no holes
        updates = {role: self.update_role(role, shards[g.world_size], lengths) for role, g in groups.items()}
        if "critic" not in updates:
            return await updates["policy"]
        if self.cfg.colocate_all:  # critic and policy share the devices: one after the other
            return (await updates["critic"]) | (await updates["policy"])
        c, p = await asyncio.gather(updates["critic"], updates["policy"])
        return c | p

    async def send_step_data(self, exp: Experience, groups: Sequence) -> dict[int, list[list[int]]]:
        """Put each rank's token-balanced :class:`RaggedShard` of the step (token ids + every per-token field) in the
        object store once per world size, shared by the roles of that size, and have each rank cache it for this
        step (``set_step_data``). Returns world size -> the sample indices of each rank's shard."""
        shards, refs = {}, {}
        for size in {g.world_size for g in groups}:
            shards[size], refs[size] = put_rank_shards(exp, size, with_fields=True)
        calls = [g.call_sharded_async("set_step_data", refs[g.world_size], self.global_step) for g in groups]
        await gather_all([ref for call in calls for ref in call])
        return shards

    async def update_role(self, role: str, shards: list[list[int]], lengths: Sequence[int]) -> dict[str, float]:
        """``role``'s passes over the step: mini-batch ``k`` is the union of every rank's ``k``-th slice of its
        shard (:func:`rank_mini_batches`); its global token / sequence counts normalise the loss exactly.

        Args:
            shards: the step's sample indices of each rank (what :meth:`send_step_data` sent).
            lengths: loss tokens of each sample of the step (``Experience.loss_tokens``).
        """
        cfg = self.cfg
        group = self.roles.policy if role == "policy" else self.roles.critic
        epochs = cfg.policy_epochs if role == "policy" else cfg.critic_epochs
        loss_cfg = cfg.policy_loss_config() if role == "policy" else cfg.value_loss_config()
        if role == "policy" and cfg.kl_mode == "loss":  # the controller's current value (fixed or adaptive)
            loss_cfg = dataclasses.replace(loss_cfg, kl_loss_coef=self.kl_ctl.value)
        if role == "policy" and self.entropy_ctl is not None:
            loss_cfg = dataclasses.replace(loss_cfg, entropy_coef=self.entropy_ctl.effective_coef)
        per_step: list[list[dict]] = []
        start, tokens = time.perf_counter(), 0
        sizes = [len(idx) for idx in shards]
        for epoch in range(epochs):
            plan = rank_mini_batches(cfg, role, self.global_step, epoch, sizes, cfg.mini_batch_bounds(role))
            for per_rank in plan:
                g_tokens, g_seqs = mini_batch_counts(shards, per_rank, lengths)
                refs = group.call_sharded_async(
                    "update_mini_batch", per_rank, self.global_step, loss_cfg, g_tokens, g_seqs
                )
                per_step.append(await gather_all(refs))
                tokens += g_tokens
        out = {f"{role}/{k}": v for k, v in _mean_metrics(per_step).items() if k not in ("tokens", "loss_share")}
        out[f"{role}/{'value_loss' if role == 'critic' else 'loss'}"] = sum(
            sum(rank["loss_share"] for rank in ranks) for ranks in per_step
        ) / len(per_step)
        out[f"perf/tokens_per_s_train_{role}"] = tokens / max(time.perf_counter() - start, 1e-9)
        self.update_spans[role] = (start, time.perf_counter())
        if role == "policy" and self.entropy_ctl is not None and "policy/entropy" in out:
            self.entropy_ctl.update(out["policy/entropy"])
            out["entropy/coef"] = self.entropy_ctl.effective_coef
        return out

    def weight_syncer(self) -> WeightSyncer:
        """The weight-sync protocol for this run's policy and engines (built once: it keeps the bucket plan, the
        broadcast group and the probe's calibration). ``auto`` choices are resolved for the cluster's devices."""
        if self._weight_syncer is None:
            import ray

            cfg = self.cfg
            device = cfg.resolved_device(ray.cluster_resources())
            self._weight_syncer = WeightSyncer(
                self.roles.policy,
                self.roles.engines,
                bucket_bytes=cfg.sync_bucket_mb * 1024**2,
                tol=cfg.resolved_sync_verify_tolerance,
                exact=not cfg.bf16,
                transport=resolve_transport(cfg.sync_transport, device, colocated=cfg.colocate_all),
                verify_with=resolve_verify_source(cfg.sync_verify_with, device),
                device=device,
            )
        return self._weight_syncer

    # ================================================================== evaluation
    async def evaluate(self) -> dict[str, float]:
        """avg@k, pass@k and maj@k on every eval set (``RolloutMixin.eval_set``: k = eval_n_samples at
        eval_temperature; maj@k only when the scorer extracts answers); dumps the generations."""
        from reasonrl.loop.eval_metrics import summarize_eval

        out = {}
        for name, rows in self.eval_sets.items():
            scored = await self.eval_set(name, rows)
            correct, keys = scored.per_prompt()
            summary = summarize_eval(correct, self.cfg.eval_n_samples, keys)
            out |= {f"eval/{name}/{k}": float(v) for k, v in summary.items()}
            self.tracker.dump_generations(self.global_step, scored.records(split=f"eval/{name}"))
            logger.info(f"eval {name} @ step {self.global_step}: {summary}")
        return out

    def dump_generations(self, batch: Rollout, step: int) -> None:
        """The first ``dump_generations`` trained samples of the step, each with the policy version (training
        steps) whose weights generated it."""
        if self.cfg.dump_generations:
            records = sample_records(
                batch.completions,
                batch.results,
                batch.rows,
                limit=self.cfg.dump_generations,
                split="train",
                policy_version=batch.policy_version,
            )
            self.tracker.dump_generations(step, records)

    # ================================================================== checkpoints
    def trainer_state(self) -> dict[str, Any]:
        state = {"global_step": self.global_step, "sampler": self.sampler_resume_state()}
        state["kl_ctl"] = {"value": self.kl_ctl.value}
        if self.entropy_ctl is not None:
            state["entropy_ctl"] = {"coef": self.entropy_ctl.coef, "enabled": self.entropy_ctl.enabled}
        return state

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        self.global_step = int(state["global_step"])
        self.sampler.load_state_dict(state["sampler"])
        self.kl_ctl.value = float(state["kl_ctl"]["value"])
        if self.entropy_ctl is not None and "entropy_ctl" in state:
            for key, value in state["entropy_ctl"].items():
                setattr(self.entropy_ctl, key, value)

    async def save_checkpoint(self) -> Path:
        from reasonrl.utils.checkpoint import save_trainer_state
        from reasonrl.utils.rng import save_rng_state

        staging = self.checkpoints.begin(self.global_step)
        try:
            await self.phases.enter(Phase.TRAINING)  # DeepSpeed saves the states from the devices
            tag = "ds"
            await gather_all(self.roles.policy.call_async("save_checkpoint", str(staging / "policy"), tag))
            if self.roles.critic is not None:
                await gather_all(self.roles.critic.call_async("save_checkpoint", str(staging / "critic"), tag))
            await gather_all(self.roles.policy.call_async("export_hf", str(staging / "policy_hf")))
            self.tokenizer.save_pretrained(staging / "policy_hf")
            save_trainer_state(staging, self.trainer_state())
            save_rng_state(staging / "rng_state.json")
            self.cfg.save_json(staging / "config.json")
        except BaseException:
            self.checkpoints.abort(staging)
            raise
        if self.phases.weights_discarded:  # the engines slept at level 2 for the save: sync them again
            await self.sync_for_generation()
        path = self.checkpoints.commit(self.global_step, staging, {"exp_name": self.cfg.exp_name})  # also prunes
        logger.info(f"checkpoint saved: {path}")
        return path

    async def load_checkpoint(self, path: Path) -> None:
        from reasonrl.utils.checkpoint import load_trainer_state
        from reasonrl.utils.rng import load_rng_state

        await gather_all(self.roles.policy.call_async("load_checkpoint", str(path / "policy"), "ds"))
        if self.roles.critic is not None:
            await gather_all(self.roles.critic.call_async("load_checkpoint", str(path / "critic"), "ds"))
        self.load_trainer_state(load_trainer_state(path))
        load_rng_state(path / "rng_state.json")
        logger.info(f"resumed from {path} at step {self.global_step}")


# ====================================================================== helpers
class _StepAbandoned(Exception):
    """A stop was asked before the step changed any state (weights, optimizer, controllers): the step is dropped."""


def _mean_metrics(per_step: Sequence[Sequence[dict]]) -> dict[str, float]:
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

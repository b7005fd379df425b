"""The asyncio PPO loop: it owns ordering and timing; the workers compute and ``reasonrl.algos`` holds the math.

:class:`PPOTrainer` composes the step's parts, each built from explicit inputs: a
:class:`~reasonrl.loop.generation.Generator` (engines, tokenizer, template, scorer, reward model), a
:class:`~reasonrl.loop.rollout.RolloutCollector` (the step's rollout and its metrics), :class:`StepForwards`
(reference / critic / policy forwards into the step's ``Experience``) and the weight syncer. One step, one ``with
self.timed(...)`` block per part (timed, shown in the progress bar)::

    prompts  --> rollout (RolloutCollector.collect: generate on all vLLM engines, final reward = scored + environment
                 + learned reward model (rewards.shaping.final_reward), dynamic sampling refills, ReMax greedy baseline)
             --> reference log-probs | critic values | policy log-probs   (concurrently; chunk by chunk,
                 started while the engines generate under split placement: reasonrl.loop.forward_stream)
             --> advantages (reasonrl.loop.learning_signal; warns when there is no signal)
             --> critic update || policy update   (concurrently unless colocated)
             --> weight sync policy -> vLLM (verified) --> eval / checkpoint / log

Generation seeds derive from (seed, step, engine), data order from (seed, episode): a run is reproducible and a
resumed run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from loguru import logger

from reasonrl import algos
from reasonrl.data.sampler import PromptSampler
from reasonrl.dataplane.experience import Experience
from reasonrl.distributed.adapter_sync import AdapterSyncer
from reasonrl.distributed.handles import EngineHandle, RoleHandles
from reasonrl.distributed.phases import Phase, PhaseMachine
from reasonrl.distributed.sync_probe import ProbeInput
from reasonrl.distributed.weight_sync import WeightSyncer, resolve_transport, resolve_verify_source
from reasonrl.distributed.worker_group import gather_all
from reasonrl.loop.continuous_rollout import ContinuousRollouts
from reasonrl.loop.evaluation import EvalSettings, evaluate_sets
from reasonrl.loop.forward_stream import ForwardSettings, StepForwards
from reasonrl.loop.generation import GenerationSettings, Generator, Scorer
from reasonrl.loop.learning_signal import NoSignalMonitor, no_signal_reason, step_advantages
from reasonrl.loop.rollout import Rollout, RolloutCollector, RolloutSettings, StepAbandoned
from reasonrl.loop.rollout_ahead import RolloutAhead
from reasonrl.loop.updates import StepUpdates, UpdateSettings
from reasonrl.models.vision import save_tokenizer_files


@dataclasses.dataclass
class Roles:
    """The running actors of one experiment (``None`` for a disabled role)."""

    policy: Any
    engines: list
    ref: Any = None
    critic: Any = None
    reward_model: Any = None
    teacher: Any = None  # the distillation teacher (teacher_pretrain): a reference-class group


def _check_roles(cfg, roles: Roles) -> None:
    """The roles a step of ``cfg`` calls exist: a reference group unless the policy computes the reference's
    log-probs (``cfg.reference_in_policy``: LoRA, or ``reference_process``), and a teacher for ``teacher_pretrain``.
    Roles started under another config (e.g. another ``reference_process`` resolution) fail here, not mid-step."""
    if cfg.use_reference and not cfg.reference_in_policy and roles.ref is None:
        raise ValueError(
            f"kl_mode={cfg.kl_mode!r} computes the reference's log-probs in a reference role "
            f"(reference_process={cfg.reference_process!r} resolves to 'own' here), but no reference group was given"
        )
    if cfg.use_teacher and roles.teacher is None:
        raise ValueError(f"teacher_pretrain={cfg.teacher_pretrain!r} needs a teacher group; none was given")


def training_steps(cfg, train_rows: Sequence[dict]) -> int:
    """The steps a run trains: every full prompt batch of its ``num_episodes`` passes over ``train_rows``, at
    most ``max_steps``."""
    steps = PromptSampler(train_rows, cfg.rollout_batch_size, cfg.seed, cfg.num_episodes).total_steps
    return min(steps, cfg.max_steps or steps)


class PPOTrainer:
    """The training loop of one experiment: :meth:`fit` runs the steps, evaluates, logs and saves checkpoints.

    Args:
        cfg: the experiment's ``BasePPOExpConfig``.
        roles: the running worker groups and engines.
        tokenizer, template: prompt encoding (and the tokenizer saved with every checkpoint).
        train_rows, eval_sets: the prompts (``PromptSampler`` order) and the eval sets by name.
        scorer: ``(completions, rows) -> results`` (the rule or user reward).
        tracker: the run's ``reasonrl.utils.tracking.Tracker``.
        checkpoints: the run's ``CheckpointManager``.
        reward_model_encoder: maps policy ``(prompt_ids, response_ids)`` samples to the reward model's vocabulary
            (``reasonrl.models.reward_inputs``); None when both share the tokenizer.
    """

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
        self.cfg, self.roles, self.tokenizer = cfg, roles, tokenizer
        _check_roles(cfg, roles)
        self.no_signal = NoSignalMonitor()
        self.eval_sets, self.tracker, self.checkpoints = eval_sets, tracker, checkpoints
        self.sampler = PromptSampler(train_rows, cfg.rollout_batch_size, cfg.seed, cfg.num_episodes)
        self.total_steps = training_steps(cfg, train_rows)
        self.global_step = 0
        self.stop = None  # a reasonrl.utils.interrupt.StopSignals while a signal may ask the run to stop
        # the loop's side of the workers: typed handles (the syncers and the phase machine keep the groups)
        self.handles = RoleHandles.from_groups(
            roles.policy, ref=roles.ref, critic=roles.critic, reward_model=roles.reward_model, teacher=roles.teacher
        )
        self.generator = Generator(
            roles.engines,
            tokenizer=tokenizer,
            template=template,
            scorer=scorer,
            settings=GenerationSettings.from_config(cfg),
            reward_model=self.handles.reward_model,
            reward_model_encoder=reward_model_encoder,
        )
        self.collector = RolloutCollector(
            self.generator,
            RolloutSettings.from_config(cfg),
            next_rows=self.sampler.next_batch,  # dynamic-sampling refills draw from the step's sampler
            stop_requested=self.stop_requested,
        )
        h = self.handles
        self.forwards = StepForwards(
            h.policy, h.ref, h.critic, ForwardSettings.from_config(cfg, h.policy.world_size), teacher=h.teacher
        )
        self.eval_settings = EvalSettings.from_config(cfg)
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
        self.updates = StepUpdates(h.policy, h.critic, UpdateSettings.from_config(cfg), self.entropy_ctl)
        # async_staleness = k > 0: the rollouts of the next k steps are generated while this one trains; with
        # fully_async the engines generate continuously instead (reasonrl.loop.continuous_rollout)
        self.ahead = (
            RolloutAhead(cfg.async_staleness, self.collector.collect, self.sampler, self.total_steps)
            if cfg.async_staleness and not cfg.fully_async
            else None
        )
        self.flow: ContinuousRollouts | None = None  # built when fit starts (it may resume from a checkpoint)
        self._flow_resume: dict | None = None
        # stream_rollout under split placement, synchronous: the forwards start on each full chunk of kept samples
        # while the engines still generate (ahead of time they would run on the weights of an older step)
        self.streams_forwards = (
            cfg.stream_rollout and self.ahead is None and not cfg.colocate_all and not cfg.fully_async
        )
        self.probe: ProbeInput | None = None  # the weight sync's end-to-end probe (sync_for_generation)
        self._weight_syncer: WeightSyncer | AdapterSyncer | None = None
        # colocate_all: what is resident on the shared devices (a no-op machine under split placement); the device
        # phases, not the timed parts of the step (``timed``)
        groups = {
            "policy": roles.policy,
            "critic": roles.critic,
            "ref": roles.ref,
            "teacher": roles.teacher,
            "reward_model": roles.reward_model,
        }
        self.phases = PhaseMachine(
            roles.engines,
            {name: g for name, g in groups.items() if g is not None},
            active=cfg.colocate_all,
            sleep_level=cfg.engine_sleep_level,
        )

    # ================================================================== the loop
    @contextlib.contextmanager
    def timed(self, name: str, times: dict[str, float] | None = None) -> Iterator[None]:
        """One timed part of the loop: the progress bar shows ``name``; with ``times``, its wall seconds are stored
        there as ``time/<name>`` when the block ends (also when it ends by an exception). (What is resident on the
        devices is :attr:`phases`, the device-phase machine, a different thing.)"""
        self.tracker.set_phase(name)
        start = time.perf_counter()
        try:
            yield
        finally:
            if times is not None:
                times[f"time/{name}"] = time.perf_counter() - start

    async def fit(self) -> dict[str, float]:
        cfg = self.cfg
        with self.timed("sync"):
            await self.sync_for_generation()  # engines start from the policy's (possibly resumed) weights
        if cfg.fully_async:
            self.flow = ContinuousRollouts(
                self.generator,
                RolloutSettings.from_config(cfg),
                self.sampler,
                staleness=cfg.async_staleness,
                partial_rollout=cfg.partial_rollout,
                resume=self._flow_resume,
            )
            await self.flow.start(version=self.global_step)
        if cfg.eval_before_training and self.global_step == 0 and self.eval_sets:
            with self.timed("eval"):
                self.tracker.log_metrics(0, await self.evaluate())
        last: dict[str, float] = {}
        saved_at = evaluated_at = None
        while self.global_step < self.total_steps and not self.stop_requested():
            sampler_state = self.sampler_resume_state()
            times: dict[str, float] = {}
            with self.timed("step", times):  # generate -> forward -> update -> sync [-> eval]
                try:
                    metrics = await self.train_step()
                except StepAbandoned as where:
                    await self.drop_rollouts_ahead()
                    self.sampler.load_state_dict(sampler_state)  # the abandoned step's prompts come again on resume
                    if cfg.fully_async:  # the groups the step took count as not trained: drawn again on resume
                        self._flow_resume = sampler_state
                    step = self.global_step + 1
                    logger.warning(f"stop requested during {where}: step {step} abandoned, nothing kept")
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
                    with self.timed("eval", metrics):
                        metrics |= await self.evaluate()
                    evaluated_at = self.global_step
            metrics |= times  # time/step
            # Log the step before its checkpoint commits: a resumed run drops rows after the checkpoint's step.
            if self.global_step % cfg.log_interval == 0 or final:
                self.tracker.log_metrics(self.global_step, metrics)
            if self._should_save():
                await self.checkpoint()
                saved_at = self.global_step
            self.tracker.advance(self.global_step, {"reward": metrics.get("reward/mean", float("nan"))})
            last = metrics
        await self.drop_rollouts_ahead()  # a stop, or data used up: nothing generated ahead is trained on
        if self.stop_requested():
            await self.stop_now()
        if self.global_step > 0 and self.global_step != evaluated_at and self.eval_sets:
            with self.timed("eval"):
                self.tracker.log_metrics(self.global_step, await self.evaluate())
        if (
            self.global_step > 0
            and self.global_step != saved_at
            and not self.checkpoints.path_for(self.global_step).exists()
        ):
            await self.checkpoint()
        self.tracker.set_phase(None)
        return last

    async def train_step(self) -> dict[str, float] | None:
        """One step (None: the data is used up): rollout, forwards, advantages, updates, weight sync."""
        chunks = self.forwards.chunks(streamed=self.streams_forwards)
        try:
            with self.timed("generate"):  # the rollout times its own parts (time/generate, time/reward, ...)
                got = await self.next_rollout(on_kept=chunks.add if self.streams_forwards else None)
            generated_at = time.perf_counter()
            if got is None:
                return None
            batch, m = got
            self.check_stop("generation")
            if not batch.completions:
                logger.warning(
                    f"step {self.global_step + 1}: no learning signal, dynamic sampling kept no prompt group (every "
                    f"group had zero reward variance in {m.get('sampling/tries', 1):.0f} round(s)); skipping the "
                    "update"
                )
                return m
            await self.phases.enter(Phase.TRAINING)
            with self.timed("forward", m):
                exp = await self.forwards.experience(batch.completions, chunks)
        finally:
            await chunks.close()
        m |= chunks.metrics(generated_at)
        m["policy/old_logprobs_reused"] = float(self.cfg.reuses_current_logprobs)
        self.check_stop("the forward passes")  # past here the step changes state (controllers, weights): finish it
        with self.timed("advantages", m):
            m |= self.compute_advantages(exp, batch)
        with self.timed("update", m):
            m |= await self.updates.run(exp, self.global_step, kl_coef=self.kl_ctl.value)
        with self.timed("sync", m):
            m |= await self.sync_for_generation(version=self.global_step + 1)
        self.dump_generations(batch, step=self.global_step + 1)
        return m

    # ================================================================== stopping on a signal
    def stop_requested(self) -> bool:
        return self.stop is not None and self.stop.requested is not None

    def check_stop(self, where: str) -> None:
        """Between phases of a step that has not changed any state yet: drop the step when a stop was asked."""
        if self.stop_requested():
            raise StepAbandoned(where)

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
                await self.checkpoint()
        logger.warning(f"stopping after step {self.global_step} on {signal.Signals(signum).name}")
        raise TrainingInterrupted(signum, self.global_step, saved)

    def _should_save(self) -> bool:
        interval = self.cfg.save_interval
        return (interval and self.global_step % interval == 0) or self.global_step == self.total_steps

    # ================================================================== rollouts, synchronous or ahead
    async def next_rollout(self, on_kept: Callable | None = None) -> tuple[Rollout, dict[str, float]] | None:
        """``(rollout, its metrics)`` of this step (None: the data is used up). Synchronous
        (``async_staleness=0``): generated now (``on_kept``: see ``RolloutCollector.collect``). Asynchronous:
        launched up to ``async_staleness`` steps earlier (:class:`RolloutAhead`), and the rollouts of the next steps
        are launched before this one trains; adds ``async/staleness`` (updates between the weights that generated
        it and the ones that train on it) and ``time/wait_rollout``. ``Rollout.policy_version``: the training steps
        whose weights generated it."""
        if self.flow is not None:
            taken = await self.flow.take(trainer_version=self.global_step)
            if taken is not None:
                taken[0].policy_version = self.global_step - int(taken[1]["async/version_lag_max"])
            return taken
        if self.ahead is None:
            rows = self.sampler.next_batch()
            if rows is None:
                return None
            batch, m = await self.collector.collect(rows, self.global_step, on_kept=on_kept)
            batch.policy_version = self.global_step
            return batch, m
        self.ahead.fill(self.global_step + 1, version=self.global_step)
        taken = await self.ahead.take(self.global_step + 1)
        if taken is None:
            return None
        batch, m, record = taken
        m["async/staleness"] = float(self.global_step - record.version)
        batch.policy_version = record.version
        return batch, m

    def sampler_resume_state(self) -> dict:
        """The sampler state a resumed run continues from: before the prompts of the oldest rollout not trained yet
        (rollouts generated ahead are dropped, their prompts drawn again)."""
        if self.flow is not None:
            return self.flow.resume_state()
        if self._flow_resume is not None:  # fully asynchronous, between flows (stopped, or not started yet)
            return self._flow_resume
        ahead = self.ahead.resume_state() if self.ahead is not None else None
        return ahead if ahead is not None else self.sampler.state_dict()

    async def drop_rollouts_ahead(self) -> None:
        if self.ahead is not None:
            await self.ahead.drop()
        if self.flow is not None:  # in-flight samples are dropped; the resume state draws their prompts again
            state = self.flow.resume_state()
            await self.flow.close()
            self.sampler.load_state_dict(state)
            self._flow_resume, self.flow = state, None

    # ================================================================== device sharing (colocate_all)
    async def sync_for_generation(self, version: int | None = None) -> dict[str, float]:
        """The verified weight sync, ordered by vLLM's sleep rules (see :mod:`reasonrl.distributed.phases`):

        SYNC (roles offloaded, engine weights awake, KV cache asleep, scheduler paused) -> load every bucket and
        check it exactly (no generation: a paused scheduler would never run it) -> GENERATION (KV cache awake,
        scheduler running) -> the end-to-end probe, which generates. Under split placement only the sync runs."""
        if self.probe is None:
            self.probe = self.sync_probe()
        if self.flow is not None:  # fully asynchronous: requests stay in flight, paused between engine steps
            async with self.flow.paused():
                syncer = self.weight_syncer()
                report = await syncer.load(self.probe)
                flow_metrics = await self.flow.synced(self.global_step if version is None else version)
                await syncer.verify(self.probe, report)
            return report.as_metrics() | flow_metrics
        async with self.generator.engines_held():  # multi-turn rollouts launched before the sync end first
            if self.ahead is not None:  # the engines first finish the rollouts queued before this sync (calls run
                await gather_all([EngineHandle(engine).ready() for engine in self.roles.engines])  # in order)
            syncer = self.weight_syncer()
            await self.phases.enter(Phase.SYNC)
            report = await syncer.load(self.probe)
            self.phases.synced()
            await self.phases.enter(Phase.GENERATION)
            await syncer.verify(self.probe, report)
        return report.as_metrics()

    def sync_probe(self) -> ProbeInput:
        """The sync's end-to-end probe: a fixed real prompt, the training set's first, which the trainer and every
        engine must score identically. A text prompt is cut to 64 tokens; a vision-language prompt keeps its
        pictures and is never cut (a cut could drop a placeholder; the check before start bounds its expanded
        length), so that the probe reaches the vision tower and projector too."""
        row = self.sampler.rows[0]
        ids = self.generator.encode([row])[0]
        images = list(row.get("images") or [])
        return ProbeInput(ids, images) if images else ProbeInput(ids[:64])

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
            teacher_logprobs=exp.teacher_logprobs,
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

    def weight_syncer(self) -> WeightSyncer | AdapterSyncer:
        """The weight-sync protocol for this run's policy and engines (built once: it keeps the bucket plan, the
        broadcast group and the probe's calibration). ``auto`` choices are resolved for the cluster's devices.
        LoRA with ``lora_sync=adapter``: the adapter-only sync (the engines keep the base model)."""
        if self._weight_syncer is None and self.cfg.use_lora and self.cfg.lora_sync == "adapter":
            tol = self.cfg.resolved_sync_verify_tolerance
            self._weight_syncer = AdapterSyncer(self.roles.policy, self.roles.engines, tol=tol, exact=not self.cfg.bf16)
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
                trainable_only=cfg.sync_trainable_only,  # a frozen vision tower is sent once, then never again
            )
        return self._weight_syncer

    # ================================================================== evaluation
    async def evaluate(self) -> dict[str, float]:
        """avg@k, pass@k and maj@k on every eval set (:func:`reasonrl.loop.evaluation.evaluate_sets`: k =
        eval_n_samples at eval_temperature; maj@k only when the scorer extracts answers); dumps the generations."""
        return await evaluate_sets(
            self.generator, self.eval_settings, self.eval_sets, step=self.global_step, tracker=self.tracker
        )

    def dump_generations(self, batch: Rollout, step: int) -> None:
        """The first ``dump_generations`` trained samples of the step, each with the policy version (training
        steps) whose weights generated it."""
        if self.cfg.dump_generations:
            records = batch.records(self.cfg.dump_generations, split="train", policy_version=batch.policy_version)
            for record, c in zip(records, batch.completions, strict=False):
                if c.token_versions is not None:  # fully asynchronous: the version that sampled each token
                    record["token_versions"] = c.token_versions
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
        self._flow_resume = state["sampler"] if "flow_first" in state["sampler"] else None
        self.kl_ctl.value = float(state["kl_ctl"]["value"])
        if self.entropy_ctl is not None and "entropy_ctl" in state:
            for key, value in state["entropy_ctl"].items():
                setattr(self.entropy_ctl, key, value)

    async def checkpoint(self) -> None:
        """Save a checkpoint of this step and log ``time/checkpoint`` (its own metrics row)."""
        times: dict[str, float] = {}
        with self.timed("checkpoint", times):
            await self.save_checkpoint()
        self.tracker.log_metrics(self.global_step, times)

    async def save_checkpoint(self) -> Path:
        from reasonrl.utils.checkpoint import save_trainer_state
        from reasonrl.utils.rng import save_rng_state

        staging = self.checkpoints.begin(self.global_step)
        try:
            await self.phases.enter(Phase.TRAINING)  # DeepSpeed saves the states from the devices
            tag = "ds"
            await self.handles.policy.save_checkpoint(str(staging / "policy"), tag)
            if self.handles.critic is not None:
                await self.handles.critic.save_checkpoint(str(staging / "critic"), tag)
            await self.handles.policy.export_hf(str(staging / "policy_hf"))
            if self.cfg.use_lora:  # the adapter alone as well (small; PeftModel.from_pretrained(base, folder))
                await self.handles.policy.export_adapter(str(staging / "policy_adapter"))
            save_tokenizer_files(self.tokenizer, self.cfg.resolve_model_path(self.cfg.pretrain), staging / "policy_hf")
            save_trainer_state(staging, self.trainer_state())
            save_rng_state(staging / "rng_state.json")
            self.cfg.save_json(staging / "config.json")
        except BaseException:
            self.checkpoints.abort(staging)
            raise
        if self.phases.weights_discarded:  # the engines slept at level 2 for the save: sync them again
            await self.sync_for_generation()
        else:  # they slept at level 1 (adapter-only sync) and kept their weights: wake them
            await self.phases.enter(Phase.GENERATION)
        path = self.checkpoints.commit(self.global_step, staging, {"exp_name": self.cfg.exp_name})  # also prunes
        logger.info(f"checkpoint saved: {path}")
        return path

    async def load_checkpoint(self, path: Path) -> None:
        from reasonrl.utils.checkpoint import load_trainer_state
        from reasonrl.utils.rng import load_rng_state

        await self.handles.policy.load_checkpoint(str(path / "policy"), "ds")
        if self.handles.critic is not None:
            await self.handles.critic.load_checkpoint(str(path / "critic"), "ds")
        self.load_trainer_state(load_trainer_state(path))
        load_rng_state(path / "rng_state.json")
        logger.info(f"resumed from {path} at step {self.global_step}")

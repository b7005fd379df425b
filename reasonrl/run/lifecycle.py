"""The life of a run, driven for an experiment given to it: :class:`ExperimentRunner`.

The experiment (a ``reasonrl.exp.BasePPOExp``, or any object with a ``cfg`` and the four hooks) says WHAT to train
on: data, reward, template. The runner owns HOW a run lives and ends, none of which a user overrides::

    validate -> resume checkpoint resolved and checked (before Ray) -> every hook called and checked
    (``reasonrl.run.exp_hooks``; the tokenizer is loaded once the data hooks passed) -> stop signals, reaper
    -> attempt 0: start (``reasonrl.run.launch.start_attempt``) -> load the checkpoint -> PPOTrainer.fit()
    -> an actor died (killed engine or DeepSpeed rank)? everything of the attempt shut down, attempt 1 resumes
       from the newest checkpoint, ... up to ``cfg.max_restarts`` times
    -> cleanup on every exit path (exit stacks: engines, workers, placement, Ray, tracker, scorer)

Signals: the first Ctrl-C / SIGTERM asks the trainer to stop between phases (and maybe save), the second raises
``KeyboardInterrupt`` at once; either way the exit stacks shut everything down.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from loguru import logger

from reasonrl.config import BasePPOExpConfig
from reasonrl.run.exp_hooks import ExpInputs, build_inputs
from reasonrl.run.launch import logged, ray_cluster_checked, start_attempt
from reasonrl.utils.interrupt import StopSignals, TrainingInterrupted
from reasonrl.utils.reaper import start_reaper


def resolve_resume(cfg: BasePPOExpConfig) -> Path | None:
    """The checkpoint a run of ``cfg`` continues (``cfg.resume``), or None for a fresh start, checked against
    ``cfg``: :class:`ConfigError` lists every field that differs from the checkpoint's ``config.json`` beyond those
    always allowed or named in ``resume_allow_changes`` (``reasonrl.config.resume``), and names an explicit
    ``resume`` path that is not a complete checkpoint, or ``resume=auto`` over checkpoints that are all damaged
    (never a silent restart). A Hub model given as the run that wrote the checkpoint gave it (``owner/name``) takes
    the commit that run pinned (:func:`reasonrl.config.model_paths.adopt_saved_pins`, which updates ``cfg``), not
    today's ``main``. Once accepted, checkpoints of another history (newer than an explicit ``resume``, or all of
    them for ``resume=none``) are moved aside (``CheckpointManager.start_from``): call it once per run."""
    from reasonrl.config import ConfigError
    from reasonrl.config.model_paths import adopt_saved_pins
    from reasonrl.config.resume import check_resume_config, read_saved_config
    from reasonrl.utils.checkpoint import CheckpointError, CheckpointManager, NoCompleteCheckpointError

    checkpoints = CheckpointManager.for_run(cfg)
    try:
        path = checkpoints.resolve_resume(cfg.resume)
    except CheckpointError as err:
        fix = ": give resume= a complete step_<n> folder, or resume=auto / resume=none"
        fix = "" if isinstance(err, NoCompleteCheckpointError) else fix  # that message names the choices itself
        raise ConfigError([f"{err}{fix}"], title="resume refused") from None
    if path is not None:
        saved = read_saved_config(path)
        adopted = adopt_saved_pins(cfg, saved)  # the commits the checkpoint was trained from
        if adopted:
            logger.info("resume keeps the checkpoint's model commits: " + ", ".join(adopted.values()))
        keep_zero_stage(cfg, saved, path)
        removed = check_resume_config(cfg, path)
        if removed:
            logger.warning(f"{path}/config.json has fields this config no longer has (ignored): {removed}")
    checkpoints.start_from(path)
    return path


def keep_zero_stage(cfg: BasePPOExpConfig, saved: dict, path: Path) -> int | None:
    """``zero_stage=auto`` resuming a checkpoint written at other ZeRO stages than auto gives the roles now (e.g. one
    written at ZeRO-3, the default before auto): the run keeps the checkpoint's stage (``cfg.zero_stage`` is set to
    it, and the checkpoints it writes record it), since a DeepSpeed engine loads only its own stage's checkpoint.
    Returns the stage kept, or None (nothing changed; an explicit stage that differs is refused by the check)."""
    from reasonrl.config import zero_stages
    from reasonrl.config.resume import field_defaults

    auto = zero_stages.role_zero_stages(cfg)
    stage = zero_stages.adopt_saved_zero_stage(cfg, saved, field_defaults(type(cfg)))
    if stage is not None:
        logger.warning(
            f"resume keeps zero_stage={stage}: {path} was written at ZeRO-{stage} and a DeepSpeed checkpoint loads "
            f"only at its own stage (zero_stage=auto would give {zero_stages.describe(auto)}; resume=none starts "
            "afresh at those)"
        )
    return stage


def newest_checkpoint(cfg: BasePPOExpConfig) -> Path | None:
    """The newest complete checkpoint of the run (where a restarted attempt resumes), or None."""
    from reasonrl.utils.checkpoint import CheckpointManager

    return CheckpointManager.for_run(cfg).latest()


def worker_died(err: Exception, roles) -> bool:
    """Whether ``err`` means an actor of the run (``roles``: the trainer's) died, rather than a bug: then the run
    is restarted."""
    import ray

    from reasonrl.distributed.failures import dead_roles, death_errors, run_actors

    if not isinstance(err, ray.exceptions.RayError):  # an error of the driver's own code: never restarted
        return False
    dead = dead_roles(run_actors(roles))
    if dead:
        logger.error(f"dead actors: {', '.join(dead)} ({err})")
    return bool(dead) or isinstance(err, death_errors())


class ExperimentRunner:
    """Runs ``exp`` (its ``cfg`` and hooks) from validation to shutdown, restarting after a dead actor.

    Attributes (set as the run goes): ``trainer`` (the current attempt's ``PPOTrainer``), ``resume_from`` (the
    checkpoint the current attempt starts from, or None).
    """

    def __init__(self, exp, address_check=None):
        """``address_check``: a :class:`~reasonrl.distributed.ray_cluster.AddressCheck` of ``cfg.ray_address``
        already under way (``run_recipe`` starts it before validating), else the address is checked in :meth:`run`."""
        self.exp = exp
        self.cfg: BasePPOExpConfig = exp.cfg
        self.trainer = None
        self.resume_from: Path | None = None
        self._resume_checked = False
        self._address_check = address_check

    def resume_checkpoint(self) -> Path | None:
        """:func:`resolve_resume` of the config, once (later calls return the first answer; a restarted attempt
        sets :attr:`resume_from` from the newest checkpoint instead)."""
        if not self._resume_checked:
            self.resume_from, self._resume_checked = resolve_resume(self.cfg), True
        return self.resume_from

    def run(self) -> dict[str, float]:
        """Validate, build and check the hooks' results, start, train, clean up. Returns the last step's metrics."""
        from reasonrl.distributed.ray_cluster import AddressCheck
        from reasonrl.rewards.main_guard import exit_if_reimporting_main
        from reasonrl.run.checks import validate_run

        exit_if_reimporting_main(f"{type(self.exp).__name__}.run()")  # a worker re-running an unguarded script
        cfg = self.cfg
        validate_run(cfg)  # fails here, before any process starts (the config's checks and its data's)
        check = self._address_check
        if check is None or check.address != cfg.ray_address:
            check = AddressCheck(cfg.ray_address)
        with ray_cluster_checked():
            check.result()  # no cluster answering: refused now, not after minutes in ray.init
        self.resume_checkpoint()  # a checkpoint written by another config is refused here too
        with contextlib.ExitStack() as stack:
            # every hook called and its result checked, before Ray starts
            inputs = build_inputs(self.exp, load_tokenizer=self._load_tokenizer)
            if inputs.close is not None:
                stack.callback(logged, inputs.close)
            logger.info(f"config ({type(cfg).__name__}):\n{cfg.table()}")
            # Ctrl-C / SIGTERM: the first one asks the trainer to stop between phases (and maybe save), the second
            # raises KeyboardInterrupt at once; either way the exit stack shuts engines, workers and Ray down.
            stop = stack.enter_context(StopSignals("finishing the start-up or the current phase"))
            start_reaper()  # before Ray starts: even a SIGKILLed driver leaves no Ray/vLLM/reward process behind
            for restart in range(cfg.max_restarts + 1):
                with contextlib.ExitStack() as attempt:  # Ray, placement, workers, engines, tracker of one attempt
                    self.start(attempt, inputs)
                    self.trainer.stop = stop.install()  # again: ray.init replaced the SIGTERM handler with an abort
                    if stop.requested is not None:  # asked during start-up: nothing was trained
                        raise TrainingInterrupted(stop.requested, self.trainer.global_step)
                    try:
                        return asyncio.run(self.fit())
                    except Exception as err:
                        if restart == cfg.max_restarts or not worker_died(err, self.trainer.roles):
                            raise
                        logger.error(
                            f"a worker died ({err.__class__.__name__}); restart {restart + 1} of "
                            f"{cfg.max_restarts}: every actor is restarted and the run resumes"
                        )
                self.resume_from = newest_checkpoint(cfg)  # everything of the attempt is shut down now
                logger.warning(f"resuming from {self.resume_from or 'the start (no checkpoint yet)'}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _load_tokenizer(self):
        """The policy's tokenizer; called by ``build_inputs`` after the data hooks passed, so that a data mistake
        is reported before torch is imported. Pins Hub models to their commits first."""
        from transformers import AutoTokenizer

        from reasonrl.sft.warm_start import register_offline_models

        register_offline_models()  # the offline models' builders, before a model is resolved
        cfg = self.cfg
        pinned = cfg.pin_models()  # Hub ids -> owner/name@<commit>: what the actors, logs and checkpoints get
        if pinned:
            logger.info("Hub models pinned to their commits: " + ", ".join(f"{k}={v}" for k, v in pinned.items()))
        return AutoTokenizer.from_pretrained(cfg.resolve_model_path(cfg.pretrain))

    def start(self, stack: contextlib.ExitStack, inputs: ExpInputs) -> None:
        """Start one attempt (:func:`reasonrl.run.launch.start_attempt`) on ``stack``; sets :attr:`trainer`."""
        self.trainer = start_attempt(self.cfg, stack, inputs, self.resume_checkpoint())

    async def fit(self) -> dict[str, float]:
        """The attempt's training: load :attr:`resume_from` when set, then ``PPOTrainer.fit()``."""
        try:
            if self.resume_from is not None:
                await self.trainer.load_checkpoint(self.resume_from)
            return await self.trainer.fit()
        finally:
            await self.trainer.generator.aclose()  # the agent gateway (agent_fn), in the loop it was started in

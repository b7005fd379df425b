"""``BasePPOExp``: build everything an experiment config describes, run the trainer, clean up.

    validate config, check the resume checkpoint's config.json (before Ray starts) -> tokenizer, then every hook
    called and its result checked (``reasonrl.loop.exp_hooks``, still before Ray starts) -> ray.init -> placement groups
    -> worker groups (policy, ref, critic, reward model) + vLLM engines -> PPOTrainer.fit() -> shutdown

Subclass it to change one piece; each hook has one job:

* :meth:`load_train_rows` / :meth:`load_eval_sets`: the data (default: ``cfg.train_data`` / ``cfg.eval_data``),
* :meth:`build_scorer`: the reward (default: ORZ math reward, or ``cfg.reward_fn``),
* :meth:`build_template`: the prompt template (default: ``cfg.prompt_template``).

A hook that returns None or the wrong type (a scorer that is not callable, no training rows, a template that
cannot render the first row) raises ``HookError`` naming the hook before anything starts. A script that calls
``run()`` must guard it with ``if __name__ == "__main__":`` (reward worker processes re-run the main module);
a worker that re-runs an unguarded script exits at the top of ``run()`` and the error says so.

Recipes (``playground/*.py``) call :func:`run_recipe`, which reads ``field=value`` overrides from the command line
and applies ``DEBUG_MODE=1`` (one device, small batches) at run time.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.config import BasePPOExpConfig
from reasonrl.loop.exp_hooks import ExpInputs, build_inputs
from reasonrl.utils.interrupt import StopSignals, TrainingInterrupted
from reasonrl.utils.reaper import start_reaper


@contextlib.contextmanager
def ray_cluster_checked():
    """Starting or joining Ray: a :class:`~reasonrl.distributed.ray_cluster.RayClusterError` (no cluster at
    ``ray_address``; ``distributed/`` has its own error type, it does not import ``config/``) raised as the
    :class:`ConfigError` on ``ray_address`` it is, before any actor starts."""
    from reasonrl.config import ConfigError
    from reasonrl.distributed.ray_cluster import RayClusterError

    try:
        yield
    except RayClusterError as err:
        raise ConfigError(err.problems, title=err.title) from err


class BasePPOExp:
    def __init__(self, cfg: BasePPOExpConfig):
        self.cfg = cfg

    # ------------------------------------------------------------------ hooks
    def load_train_rows(self) -> list[dict]:
        from reasonrl.data import load_rows

        rows: list[dict] = []
        for source in self.cfg.train_data:
            rows += load_rows(source, fields=self.cfg.data_fields).rows
        return rows

    def load_eval_sets(self) -> dict[str, list[dict]]:
        """Rows of each ``cfg.eval_data`` source, keyed by a unique readable name (``eval_set_names``)."""
        from reasonrl.data import load_rows
        from reasonrl.data.eval_names import eval_set_names

        sources = self.cfg.eval_data
        names = eval_set_names(sources)
        return {name: load_rows(s, fields=self.cfg.data_fields).rows for name, s in zip(names, sources, strict=True)}

    def build_scorer(self):
        from reasonrl.loop.scoring import build_scorer

        return build_scorer(self.cfg)

    def build_template(self, tokenizer):
        from reasonrl.data import get_template

        return get_template(self.cfg.prompt_template, tokenizer=tokenizer)

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, float]:
        """Validate, build and check the hooks' results, start, train, clean up. Returns the last step's metrics."""
        from reasonrl.distributed.ray_cluster import check_ray_address
        from reasonrl.rewards.main_guard import exit_if_reimporting_main

        exit_if_reimporting_main(f"{type(self).__name__}.run()")  # a worker re-running an unguarded script stops here
        cfg = self.cfg
        cfg.validate()  # fails here, before any process starts
        with ray_cluster_checked():
            check_ray_address(cfg.ray_address)  # no cluster answering: refused now, not after minutes in ray.init
        self.resume_checkpoint()  # a checkpoint written by another config is refused here too

        def load_tokenizer():  # after the data hooks passed: a data mistake is reported before torch is imported
            from transformers import AutoTokenizer

            import reasonrl.sft.warm_start  # noqa: F401  fills the offline-model registry before a model is resolved

            pinned = cfg.pin_models()  # Hub ids -> owner/name@<commit>: what the actors, logs and checkpoints get
            if pinned:
                logger.info("Hub models pinned to their commits: " + ", ".join(f"{k}={v}" for k, v in pinned.items()))
            return AutoTokenizer.from_pretrained(cfg.resolve_model_path(cfg.pretrain))

        with contextlib.ExitStack() as stack:
            # every hook called and its result checked, before Ray starts
            inputs = build_inputs(self, load_tokenizer=load_tokenizer)
            tokenizer = inputs.tokenizer
            if inputs.close is not None:
                stack.callback(_logged, inputs.close)
            logger.info(f"config ({type(cfg).__name__}):\n{cfg.table()}")
            # Ctrl-C / SIGTERM: the first one asks the trainer to stop between phases (and maybe save), the second
            # raises KeyboardInterrupt at once; either way the exit stack shuts engines, workers and Ray down.
            stop = stack.enter_context(StopSignals("finishing the start-up or the current phase"))
            start_reaper()  # before Ray starts: even a SIGKILLed driver leaves no Ray/vLLM/reward process behind
            for restart in range(cfg.max_restarts + 1):
                with contextlib.ExitStack() as attempt:  # Ray, placement, workers, engines, tracker of one attempt
                    self._start(attempt, tokenizer, inputs)
                    self.trainer.stop = stop.install()  # again: ray.init replaced the SIGTERM handler with an abort
                    if stop.requested is not None:  # asked during start-up: nothing was trained
                        raise TrainingInterrupted(stop.requested, self.trainer.global_step)
                    try:
                        return asyncio.run(self._fit())
                    except Exception as err:
                        if restart == cfg.max_restarts or not self._worker_died(err):
                            raise
                        logger.error(
                            f"a worker died ({err.__class__.__name__}); restart {restart + 1} of "
                            f"{cfg.max_restarts}: every actor is restarted and the run resumes"
                        )
                self._resume_path = self._newest_checkpoint()  # everything of the attempt is shut down now
                logger.warning(f"resuming from {self._resume_path or 'the start (no checkpoint yet)'}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _worker_died(self, err: Exception) -> bool:
        """Whether ``err`` means an actor of the run died (then it is restarted), rather than a bug."""
        import ray

        from reasonrl.distributed.failures import dead_roles, death_errors, run_actors

        if not isinstance(err, ray.exceptions.RayError):  # an error of the driver's own code: never restarted
            return False
        dead = dead_roles(run_actors(self.trainer.roles))
        if dead:
            logger.error(f"dead actors: {', '.join(dead)} ({err})")
        return bool(dead) or isinstance(err, death_errors())

    def _newest_checkpoint(self) -> Path | None:
        from reasonrl.utils.checkpoint import CheckpointManager

        return CheckpointManager.for_run(self.cfg).latest()

    def _start(self, stack: contextlib.ExitStack, tokenizer, inputs: ExpInputs) -> None:
        import ray

        from reasonrl.distributed.placement import build_placement
        from reasonrl.distributed.ray_cluster import init_ray
        from reasonrl.loop.trainer import PPOTrainer, training_steps
        from reasonrl.utils.checkpoint import CheckpointManager
        from reasonrl.utils.worker_logs import exported_log_file

        cfg = self.cfg
        num_steps = training_steps(cfg, inputs.train_rows)
        resume_from = self.resume_checkpoint()  # resolved and checked before Ray started
        # The tracker opens before Ray: its train.log also gets the workers' warnings and errors (the local Ray
        # instance and its workers inherit REASONRL_LOG_FILE: reasonrl.utils.worker_logs).
        tracker = self._start_tracker(stack, num_steps, resume_from)
        stack.enter_context(exported_log_file(tracker.run_dir / "train.log"))
        started_ray = not ray.is_initialized()
        with ray_cluster_checked():
            init_ray(cfg.ray_address, device=cfg.device)
        if started_ray:  # stops the local instance, or disconnects from the cluster
            stack.callback(_logged, ray.shutdown)
        cfg.validate(ray.cluster_resources(), ray.nodes())  # the cluster's real resources, before any placement
        plan = build_placement(
            cfg.role_resources(),
            colocate_all=cfg.colocate_all,
            colocate_policy_ref=cfg.colocate_policy_ref,
            colocate_critic_reward=cfg.colocate_critic_reward,
            device=cfg.resolved_device(ray.cluster_resources()),  # the cluster's devices, not the driver's
            cpus_per_bundle=cfg.cpus_per_bundle,
        )
        stack.callback(_logged, plan.remove)
        self._check_models_on_nodes(plan)  # every node that loads a model has it, before any actor starts
        reward_pad_id, reward_encoder = self._reward_model_inputs(tokenizer)
        roles = self._start_roles(stack, plan, num_steps, tokenizer.pad_token_id, reward_pad_id)
        checkpoints = CheckpointManager.for_run(cfg)
        self.trainer = PPOTrainer(
            cfg,
            roles,
            tokenizer=tokenizer,
            template=inputs.template,
            train_rows=inputs.train_rows,
            eval_sets=inputs.eval_sets,
            scorer=inputs.scorer,  # built and checked before Ray started; closed by run()'s exit stack
            tracker=tracker,
            checkpoints=checkpoints,
            reward_model_encoder=reward_encoder,
        )
        self.resume_from = resume_from

    def _start_tracker(self, stack: contextlib.ExitStack, num_steps: int, resume_from: Path | None):
        """The run's :class:`reasonrl.utils.tracking.Tracker` (TensorBoard and/or W&B per ``cfg.tracker``, the
        config logged once), closed by ``stack``; a resumed run logs from the step after its checkpoint."""
        from reasonrl.utils.tracking import Tracker

        cfg = self.cfg
        start_step = 0
        if resume_from is not None:
            from reasonrl.utils.checkpoint import load_trainer_state

            start_step = int(load_trainer_state(resume_from)["global_step"]) + 1  # first step the run will log
        tracker = Tracker(
            Path(cfg.log_dir),
            cfg.exp_name,
            progress_total=num_steps,
            progress_bar=cfg.progress_bar,
            start_step=start_step,
            tracker=cfg.tracker,
            wandb_project=cfg.wandb_project,
            wandb_run_name=cfg.wandb_run_name,
            run_config=cfg.to_dict(),
        )
        stack.callback(_logged, tracker.close)  # also writes summary.png / summary.html of the curves
        tracker.log_table_at_start(cfg.table())
        return tracker

    def resume_checkpoint(self) -> Path | None:
        """The checkpoint this run continues (``cfg.resume``), or None for a fresh start; resolved once, before Ray
        starts, and checked against this config: :class:`ConfigError` lists every field that differs from the
        checkpoint's ``config.json`` beyond those always allowed or named in ``resume_allow_changes``
        (``reasonrl.config.resume``), and names an explicit ``resume`` path that is not a complete checkpoint, or
        ``resume=auto`` over checkpoints that are all damaged (never a silent restart). A Hub model given as the run
        that wrote the checkpoint gave it (``owner/name``) takes the commit that run pinned
        (:func:`reasonrl.config.model_paths.adopt_saved_pins`), not today's ``main``. Once accepted, checkpoints of
        another history (newer than an explicit ``resume``, or all of them for ``resume=none``) are moved aside
        (``CheckpointManager.start_from``)."""
        if getattr(self, "_resume_checked", False):
            return self._resume_path
        from reasonrl.config import ConfigError
        from reasonrl.config.model_paths import adopt_saved_pins
        from reasonrl.config.resume import check_resume_config, read_saved_config
        from reasonrl.utils.checkpoint import CheckpointError, CheckpointManager, NoCompleteCheckpointError

        cfg = self.cfg
        checkpoints = CheckpointManager.for_run(cfg)
        try:
            path = checkpoints.resolve_resume(cfg.resume)
        except CheckpointError as err:
            fix = ": give resume= a complete step_<n> folder, or resume=auto / resume=none"
            fix = "" if isinstance(err, NoCompleteCheckpointError) else fix  # that message names the choices itself
            raise ConfigError([f"{err}{fix}"], title="resume refused") from None
        if path is not None:
            adopted = adopt_saved_pins(cfg, read_saved_config(path))  # the commits the checkpoint was trained from
            if adopted:
                logger.info("resume keeps the checkpoint's model commits: " + ", ".join(adopted.values()))
            removed = check_resume_config(cfg, path)
            if removed:
                logger.warning(f"{path}/config.json has fields this config no longer has (ignored): {removed}")
        checkpoints.start_from(path)
        self._resume_path, self._resume_checked = path, True
        return path

    def _check_models_on_nodes(self, plan) -> None:
        """Every node the placement uses resolves the models its actors will load, one Ray task per node
        (:mod:`reasonrl.distributed.model_check`; a node that is online downloads a missing Hub snapshot then).
        :class:`ConfigError` lists every node and model missing, with what to do, before any engine or DeepSpeed
        rank starts. A one-node cluster that is the driver's own node is not asked: the driver resolved every model
        there already (``model_source``)."""
        from reasonrl.config import ConfigError
        from reasonrl.config.mapping import role_model_sources
        from reasonrl.distributed.model_check import ModelsNotOnNodesError, check_models_on_nodes

        sources = role_model_sources(self.cfg, plan.roles)  # resolved here first (downloaded when online)
        try:
            check_models_on_nodes(plan, sources)
        except ModelsNotOnNodesError as err:
            raise ConfigError(err.problems, title="models missing on some nodes") from None

    def _reward_model_inputs(self, tokenizer):
        """``(pad id, encoder)`` of the learned reward model: its own tokenizer's pad id, and None when it shares
        the policy's vocabulary, else a re-tokenising encoder (``reasonrl.models.reward_inputs``)."""
        if not self.cfg.use_reward_model:
            return None, None
        from transformers import AutoTokenizer

        from reasonrl.models.reward_inputs import reward_model_encoder

        reward_tokenizer = AutoTokenizer.from_pretrained(self.cfg.resolve_model_path(self.cfg.reward_pretrain))
        pad = reward_tokenizer.pad_token_id
        pad = pad if pad is not None else reward_tokenizer.eos_token_id
        return pad, reward_model_encoder(tokenizer, reward_tokenizer)

    def _start_roles(
        self, stack: contextlib.ExitStack, plan, num_steps: int, pad_token_id: int, reward_pad_id: int | None = None
    ):
        """Worker groups and engines, each registered for shutdown. The reward model's workers pad with its own
        tokenizer's pad id (``reward_pad_id``). Split placement: all set up concurrently. ``colocate_all``: engines
        first -> ready -> asleep, then the DeepSpeed setups (vLLM refuses to start when the free device memory is
        below ``gpu_memory_utilization`` x total, so the two must not race); the devices then are in the TRAINING
        phase of :mod:`reasonrl.distributed.phases`."""
        import ray

        from reasonrl.distributed.phases import SLEEP_LEVEL
        from reasonrl.distributed.ppo_workers import CriticWorker, PolicyWorker, ReferenceWorker, RewardModelWorker
        from reasonrl.distributed.worker_group import WorkerGroup
        from reasonrl.loop.trainer import Roles

        cfg = self.cfg
        classes = {"policy": PolicyWorker, "ref": ReferenceWorker, "critic": CriticWorker, "reward": RewardModelWorker}
        groups: dict[str, Any] = {}
        setups = []  # (group, worker config)
        for role, cls in classes.items():
            if role in plan:
                groups[role] = WorkerGroup(cls, plan[role], name=role)
                stack.callback(_logged, groups[role].kill)
                pad = reward_pad_id if role == "reward" and reward_pad_id is not None else pad_token_id
                # attn_implementation travels unresolved: each worker resolves "auto" where it runs
                worker_cfg = cfg.worker_config(role, num_rollout_steps=num_steps, pad_token_id=pad)
                setups.append((groups[role], worker_cfg))
        engines = start_vllm_engines(cfg, plan["vllm"], stack)
        ready = [e.ready.remote() for e in engines]
        # colocate_all on GPUs: vLLM refuses to start unless gpu_memory_utilization x device is free, so engines
        # start and fall asleep before any DeepSpeed setup fills the devices. On CPU (no such check; sleep is
        # simulated by the engines) both load at once: ~4 s less start-up on 2 cores.
        engines_first = cfg.colocate_all and plan.device == "gpu"
        if engines_first:
            ray.get(ready)
            ray.get([e.sleep.remote(SLEEP_LEVEL) for e in engines])
            ready = []
        ray.get(ready + [ref for group, wcfg in setups for ref in group.call_async("setup", wcfg)])
        if cfg.colocate_all and not engines_first:
            ray.get([e.sleep.remote(SLEEP_LEVEL) for e in engines])  # the phase machine starts with engines asleep
        _log_attention(groups)
        return Roles(
            policy=groups["policy"],
            engines=engines,
            ref=groups.get("ref"),
            critic=groups.get("critic"),
            reward_model=groups.get("reward"),
        )

    async def _fit(self) -> dict[str, float]:
        if self.resume_from is not None:
            await self.trainer.load_checkpoint(self.resume_from)
        return await self.trainer.fit()


def run_recipe(
    cfg_cls: type[BasePPOExpConfig], exp_cls: type[BasePPOExp] = BasePPOExp, argv: Sequence[str] | None = None
):
    """Entry point of a playground recipe: ``python -m playground.<recipe> [field=value ...]``.

    ``DEBUG_MODE=1`` in the environment shrinks the recipe to one device and small batches (read here, at run
    time, never at import).
    """
    from reasonrl.config import ConfigError

    try:
        cfg = cfg_cls.from_cli(argv)
        cfg.validate()
        exp = exp_cls(cfg)
        exp.resume_checkpoint()  # a checkpoint of another config is refused here (kept for run(), not re-resolved)
    except ConfigError as err:  # a readable message, no traceback: nothing has started yet
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    try:
        return exp.run()
    except ConfigError as err:  # hooks, Ray address, cluster resources: before any actor starts (Ray is shut down)
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    except TrainingInterrupted as err:  # Ctrl-C / SIGTERM: everything is shut down; exit as a shell would
        print(f"reasonrl: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None
    except KeyboardInterrupt:  # a second signal: stopped where it was, cleanups done
        print("reasonrl: stopped at once by a second signal; no checkpoint written on the way out", file=sys.stderr)
        raise SystemExit(130) from None


def _log_attention(groups: dict[str, Any]) -> None:
    """One line per role: the attention backend and layout its workers resolved for themselves."""
    import ray

    from reasonrl.models import attention_summary

    reports = {role: group.call_async("attention") for role, group in groups.items()}
    for role, refs in reports.items():
        logger.info(attention_summary(role, ray.get(refs)))


def start_vllm_engines(cfg: BasePPOExpConfig, placement, stack: contextlib.ExitStack) -> list:
    """The config's vLLM engines on ``placement`` (the ``vllm`` role of a placement plan), loaded from
    ``cfg.pretrain``; their shutdown is registered on ``stack``. Used by training and by ``reasonrl.eval``."""
    from reasonrl.distributed.vllm_engine import create_vllm_engines

    engines = create_vllm_engines(
        cfg.vllm_num_engines,
        cfg.model_source(cfg.pretrain),  # a Hub id at its commit (each engine resolves it on its node) or a folder
        placement=placement,
        dtype="bfloat16" if cfg.bf16 else "float32",
        max_model_len=cfg.resolved_vllm_max_model_len,
        tensor_parallel_size=cfg.vllm_tensor_parallel_size,
        gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
        enable_sleep_mode=cfg.vllm_enable_sleep,
        processed_logprobs=cfg.rollout_correction != "off",  # log-probs after temperature, as the trainer's
        seed=cfg.seed,
    )
    stack.callback(_logged, lambda: _shutdown_engines(engines))
    return engines


# ---------------------------------------------------------------------- cleanup
def _logged(fn) -> None:
    """Run one cleanup of ``run()``'s exit stack; a failing cleanup is logged and the others still run."""
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - keep cleaning up the rest
        logger.warning(f"cleanup {getattr(fn, '__qualname__', fn)} failed: {err}")


def _shutdown_engines(engines) -> None:
    import ray

    try:
        ray.get([e.shutdown.remote() for e in engines], timeout=120)
    finally:
        for engine in engines:
            ray.kill(engine)

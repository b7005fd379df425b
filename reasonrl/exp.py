"""``BasePPOExp``: build everything an experiment config describes, run the trainer, clean up.

    validate config (before Ray starts) -> models and data -> ray.init -> placement groups
    -> worker groups (policy, ref, critic, reward model) + vLLM engines -> PPOTrainer.fit() -> shutdown

Subclass it to change one piece; each hook has one job:

* :meth:`load_train_rows` / :meth:`load_eval_sets`: the data (default: ``cfg.train_data`` / ``cfg.eval_data``),
* :meth:`build_scorer`: the reward (default: ORZ math reward, or ``cfg.reward_fn``),
* :meth:`build_template`: the prompt template (default: ``cfg.prompt_template``).

Recipes (``playground/*.py``) call :func:`run_recipe`, which reads ``field=value`` overrides from the command line
and applies ``DEBUG_MODE=1`` (one device, small batches) at run time.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.config import BasePPOExpConfig


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
        from reasonrl.data import load_rows

        return {Path(s).stem: load_rows(s, fields=self.cfg.data_fields).rows for s in self.cfg.eval_data}

    def build_scorer(self):
        from reasonrl.scoring import build_scorer

        return build_scorer(self.cfg)

    def build_template(self, tokenizer):
        from reasonrl.data import get_template

        return get_template(self.cfg.prompt_template, tokenizer=tokenizer)

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, float]:
        """Validate, build, train, clean up. Returns the last step's metrics."""
        cfg = self.cfg
        cfg.validate()  # fails here, before any process starts
        policy_path = cfg.resolve_model_path(cfg.pretrain)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(policy_path)
        template = self.build_template(tokenizer)
        train_rows, eval_sets = self.load_train_rows(), self.load_eval_sets()
        if len(train_rows) < cfg.rollout_batch_size:
            raise ValueError(
                f"rollout_batch_size={cfg.rollout_batch_size} exceeds the {len(train_rows)} training rows of "
                f"train_data={cfg.train_data}: lower rollout_batch_size or add data"
            )
        logger.info(f"config ({type(cfg).__name__}):\n{cfg.table()}")
        with _Stack() as stack:
            self._start(stack, tokenizer, template, train_rows, eval_sets)
            return asyncio.run(self._fit())

    def _start(self, stack: _Stack, tokenizer, template, train_rows, eval_sets) -> None:
        import ray

        from reasonrl.distributed.placement import build_placement
        from reasonrl.distributed.ray_cluster import init_ray
        from reasonrl.trainer import PPOTrainer
        from reasonrl.utils.checkpoint import CheckpointManager
        from reasonrl.utils.tracking import Tracker

        cfg = self.cfg
        started_ray = not ray.is_initialized()
        init_ray(cfg.ray_address)
        if started_ray and not cfg.ray_address:
            stack.push(ray.shutdown)
        plan = build_placement(
            cfg.role_resources(),
            colocate_all=cfg.colocate_all,
            colocate_policy_ref=cfg.colocate_policy_ref,
            colocate_critic_reward=cfg.colocate_critic_reward,
            device=cfg.resolved_device(),
            cpus_per_bundle=cfg.cpus_per_bundle,
        )
        stack.push(plan.remove)
        from reasonrl.data.sampler import PromptSampler

        num_steps = PromptSampler(train_rows, cfg.rollout_batch_size, cfg.seed, cfg.num_episodes).total_steps
        num_steps = min(num_steps, cfg.max_steps or num_steps)
        roles = self._start_roles(stack, plan, num_steps, tokenizer.pad_token_id)
        scorer = self.build_scorer()
        stack.push(scorer.close)
        checkpoints = CheckpointManager(Path(cfg.ckpt_dir) / cfg.exp_name, keep_last=cfg.keep_last_ckpts)
        resume_from = checkpoints.resolve_resume(cfg.resume)
        self.trainer = PPOTrainer(
            cfg,
            roles,
            tokenizer=tokenizer,
            template=template,
            train_rows=train_rows,
            eval_sets=eval_sets,
            scorer=scorer,
            tracker=None,
            checkpoints=checkpoints,
        )
        self.resume_from = resume_from
        start_step = 0
        if resume_from is not None:
            from reasonrl.utils.checkpoint import load_trainer_state

            start_step = int(load_trainer_state(resume_from)["global_step"]) + 1  # first step the run will log
        tracker = Tracker(
            Path(cfg.log_dir),
            cfg.exp_name,
            progress_total=self.trainer.total_steps,
            progress_bar=cfg.progress_bar,
            start_step=start_step,
        )
        stack.push(tracker.close)  # also writes summary.png / summary.html of the curves
        tracker.log_table_at_start(cfg.table())
        self.trainer.tracker = tracker

    def _start_roles(self, stack: _Stack, plan, num_steps: int, pad_token_id: int):
        """Worker groups and engines, all set up concurrently; each registered for shutdown."""
        import ray

        from reasonrl.distributed.ppo_workers import CriticWorker, PolicyWorker, ReferenceWorker, RewardModelWorker
        from reasonrl.distributed.vllm_engine import create_vllm_engines
        from reasonrl.distributed.worker_group import WorkerGroup
        from reasonrl.trainer import Roles

        cfg = self.cfg
        classes = {"policy": PolicyWorker, "ref": ReferenceWorker, "critic": CriticWorker, "reward": RewardModelWorker}
        groups: dict[str, Any] = {}
        setups = []
        for role, cls in classes.items():
            if role in plan:
                groups[role] = WorkerGroup(cls, plan[role], name=role)
                stack.push(groups[role].kill)
                worker_cfg = cfg.worker_config(role, num_rollout_steps=num_steps, pad_token_id=pad_token_id)
                setups += groups[role].call_async("setup", worker_cfg)
        engines = create_vllm_engines(
            cfg.vllm_num_engines,
            cfg.resolve_model_path(cfg.pretrain),
            placement=plan["vllm"],
            dtype="bfloat16" if cfg.bf16 else "float32",
            max_model_len=cfg.resolved_vllm_max_model_len,
            tensor_parallel_size=cfg.vllm_tensor_parallel_size,
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            enable_sleep_mode=cfg.vllm_enable_sleep,
            seed=cfg.seed,
        )
        stack.push(lambda: _shutdown_engines(engines))
        ray.get(setups + [e.ready.remote() for e in engines])
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
    except ConfigError as err:  # a readable message, no traceback: nothing has started yet
        print(err, file=sys.stderr)
        raise SystemExit(2) from None
    return exp_cls(cfg).run()


# ---------------------------------------------------------------------- cleanup
class _Stack:
    """Runs registered cleanups in reverse order on exit, even after errors; a failing cleanup is logged."""

    def __init__(self):
        self.callbacks: list = []

    def push(self, fn) -> None:
        self.callbacks.append(fn)

    def __enter__(self) -> _Stack:
        return self

    def __exit__(self, *exc) -> None:
        while self.callbacks:
            fn = self.callbacks.pop()
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

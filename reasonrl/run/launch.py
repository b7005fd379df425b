"""One attempt of a run, started: Ray, the placement, the workers and engines, the tracker and the trainer.

:func:`start_attempt` is what :class:`reasonrl.run.lifecycle.ExperimentRunner` calls once per attempt (the first
one, and again after a dead actor): every resource it starts is registered on the attempt's exit stack, last
started first stopped (:func:`logged`: a failing cleanup is logged and the others still run). The pieces are plain
functions of the config so that ``reasonrl.eval`` starts its engines with the same code.

    tracker -> ray.init (or join ``ray_address``) -> cluster check -> placement groups -> models on every node
    -> vLLM engines + worker groups (policy, ref, critic, reward model; colocate_all on GPUs: after the engines
    are ready and asleep) -> PPOTrainer
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from loguru import logger

from reasonrl.config import BasePPOExpConfig
from reasonrl.run.checks import validate_run
from reasonrl.run.exp_hooks import ExpInputs
from reasonrl.run.judge_launch import start_judge


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


def start_attempt(cfg: BasePPOExpConfig, stack: contextlib.ExitStack, inputs: ExpInputs, resume_from: Path | None):
    """Start everything one attempt of the run needs and return its ``PPOTrainer``; every resource is registered on
    ``stack`` (closing it shuts the attempt down). ``inputs``: the checked hooks' results (tokenizer, template,
    rows, scorer: built once per run, before Ray). ``resume_from``: the checkpoint the trainer will load (the
    tracker logs from the step after it)."""
    import ray

    from reasonrl.distributed.placement import build_placement
    from reasonrl.distributed.ray_cluster import init_ray
    from reasonrl.loop.trainer import PPOTrainer, training_steps
    from reasonrl.utils.checkpoint import CheckpointManager
    from reasonrl.utils.worker_logs import exported_log_file

    tokenizer = inputs.tokenizer
    num_steps = training_steps(cfg, inputs.train_rows)
    # The tracker opens before Ray: its train.log also gets the workers' warnings and errors (the local Ray
    # instance and its workers inherit REASONRL_LOG_FILE: reasonrl.utils.worker_logs).
    tracker = start_tracker(cfg, stack, num_steps, resume_from)
    tracker.set_phase("start-up")  # next to the progress bar until the first step: Ray, placement, engines, ranks
    stack.enter_context(exported_log_file(tracker.run_dir / "train.log"))
    started_ray = not ray.is_initialized()
    with ray_cluster_checked():
        init_ray(cfg.ray_address, device=cfg.device)
    if started_ray:  # stops the local instance, or disconnects from the cluster
        stack.callback(logged, ray.shutdown)
    validate_run(cfg, ray.cluster_resources(), ray.nodes())  # the cluster's real resources, before any placement
    plan = build_placement(
        cfg.role_resources(),
        colocate_all=cfg.colocate_all,
        colocate_policy_ref=cfg.colocate_policy_ref,
        colocate_critic_reward=cfg.colocate_critic_reward,
        device=cfg.resolved_device(ray.cluster_resources()),  # the cluster's devices, not the driver's
        cpus_per_bundle=cfg.cpus_per_bundle,
    )
    stack.callback(logged, plan.remove)
    check_models_on_nodes(cfg, plan)  # every node that loads a model has it, before any actor starts
    check_ckpt_dir_shared(cfg, plan)  # every node whose ranks write checkpoints shares ckpt_dir with the driver
    # reward_num_cpus > 0: the math / code routes' actors, on the CPUs the placement left; they start with the roles
    reward_actors = start_reward_actors(cfg, stack, inputs.scorer)
    judge_engine = start_judge(cfg, stack, inputs.scorer, plan.device)  # judge_pretrain: its own CPU bundle
    reward_pad_id, reward_encoder = reward_model_inputs(cfg, tokenizer)
    roles = start_roles(cfg, stack, plan, num_steps, tokenizer.pad_token_id, reward_pad_id)
    if reward_actors is not None:
        reward_actors.wait_ready()
    if judge_engine is not None:
        ray.get(judge_engine.ready.remote())
    return PPOTrainer(
        cfg,
        roles,
        tokenizer=tokenizer,
        template=inputs.template,
        train_rows=inputs.train_rows,
        eval_sets=inputs.eval_sets,
        scorer=inputs.scorer,  # built and checked before Ray started; closed by the runner's exit stack
        tracker=tracker,
        checkpoints=CheckpointManager.for_run(cfg),
        reward_model_encoder=reward_encoder,
    )


def start_tracker(cfg: BasePPOExpConfig, stack: contextlib.ExitStack, num_steps: int, resume_from: Path | None):
    """The run's :class:`reasonrl.utils.tracking.Tracker` (TensorBoard and/or W&B per ``cfg.tracker``, the
    config logged once), closed by ``stack``; a resumed run logs from the step after its checkpoint."""
    from reasonrl.utils.tracking import Tracker

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
    stack.callback(logged, tracker.close)  # also writes summary.png / summary.html of the curves
    tracker.log_table_at_start(cfg.table())
    return tracker


def start_reward_actors(cfg: BasePPOExpConfig, stack: contextlib.ExitStack, scorer):
    """``reward_num_cpus > 0``: start that many reward actors (:mod:`reasonrl.distributed.reward_actors`), attach
    them to the routing scorer's math and code routes, and register detach-then-close on ``stack``; returns the
    :class:`~reasonrl.distributed.reward_actors.RewardActors` (not yet waited for), or None with
    ``reward_num_cpus=0``. Call it after the placement groups hold their CPUs: :class:`ConfigError` on
    ``reward_num_cpus`` when fewer CPUs are free, before any actor starts. The scorer was built and checked before
    Ray (``reasonrl.run.exp_hooks``); each attempt attaches actors of its own."""
    if cfg.reward_num_cpus <= 0:
        return None
    import ray

    from reasonrl.config import ConfigError
    from reasonrl.distributed.reward_actors import RewardActors
    from reasonrl.rewards.cluster_routes import cluster_target

    target = cluster_target(scorer)
    if target is None:  # refused before Ray by the hooks' check; a caller that skipped it gets the same reason
        raise ConfigError([f"reward_num_cpus={cfg.reward_num_cpus}: {type(scorer).__name__} has no cluster routes"])
    free = ray.available_resources().get("CPU", 0.0)
    if free < cfg.reward_num_cpus:
        raise ConfigError(
            [
                f"reward_num_cpus={cfg.reward_num_cpus} needs as many free CPUs once the placement groups hold theirs; "
                f"the cluster has {free:g} free of {ray.cluster_resources().get('CPU', 0.0):g}: lower "
                "reward_num_cpus or cpus_per_bundle, or add (CPU-only) nodes"
            ],
            title="reward actors cannot start",
        )
    builds = target.cluster_builds()
    eager = [kind for kind in builds if kind == target.default]  # the default route's workers start with the actor
    actors = RewardActors(builds, cfg.reward_num_cpus, eager=eager)
    stack.callback(logged, actors.close)
    target.attach_cluster({kind: actors.scorer(kind) for kind in builds})
    stack.callback(logged, target.detach_cluster)  # runs first: no batch reaches actors being closed
    return actors


def check_models_on_nodes(cfg: BasePPOExpConfig, plan) -> None:
    """Every node the placement uses resolves the models its actors will load, one Ray task per node
    (:mod:`reasonrl.distributed.model_check`; a node that is online downloads a missing Hub snapshot then).
    :class:`ConfigError` lists every node and model missing, with what to do, before any engine or DeepSpeed
    rank starts. A one-node cluster that is the driver's own node is not asked: the driver resolved every model
    there already (``model_source``)."""
    from reasonrl.config import ConfigError
    from reasonrl.config.mapping import role_model_sources
    from reasonrl.distributed.model_check import ModelsNotOnNodesError
    from reasonrl.distributed.model_check import check_models_on_nodes as check

    sources = role_model_sources(cfg, plan.roles)  # resolved here first (downloaded when online)
    try:
        check(plan, sources)
    except ModelsNotOnNodesError as err:
        raise ConfigError(err.problems, title="models missing on some nodes") from None


def check_ckpt_dir_shared(cfg: BasePPOExpConfig, plan) -> None:
    """A placement whose policy or critic ranks run on other nodes than the driver's needs ``ckpt_dir`` on storage
    they all share (:mod:`reasonrl.distributed.shared_dirs`, one Ray task per such node); else :class:`ConfigError`
    naming ``ckpt_dir`` and each node, before any rank starts. Nothing is asked on one machine."""
    from reasonrl.config import ConfigError
    from reasonrl.distributed.shared_dirs import DirsNotSharedError, check_dirs_shared

    try:
        check_dirs_shared(plan, {"ckpt_dir": str(cfg.ckpt_dir)})
    except DirsNotSharedError as err:
        raise ConfigError(err.problems, title="ckpt_dir is not shared by the nodes that write checkpoints") from None


def reward_model_inputs(cfg: BasePPOExpConfig, tokenizer):
    """``(pad id, encoder)`` of the learned reward model: its own tokenizer's pad id, and None when it shares
    the policy's vocabulary, else a re-tokenising encoder (``reasonrl.models.reward_inputs``)."""
    if not cfg.use_reward_model:
        return None, None
    from transformers import AutoTokenizer

    from reasonrl.models.reward_inputs import reward_model_encoder

    reward_tokenizer = AutoTokenizer.from_pretrained(cfg.resolve_model_path(cfg.reward_pretrain))
    pad = reward_tokenizer.pad_token_id
    pad = pad if pad is not None else reward_tokenizer.eos_token_id
    return pad, reward_model_encoder(tokenizer, reward_tokenizer)


def start_roles(
    cfg: BasePPOExpConfig,
    stack: contextlib.ExitStack,
    plan,
    num_steps: int,
    pad_token_id: int,
    reward_pad_id: int | None = None,
):
    """Worker groups and engines, each registered for shutdown. The reward model's workers pad with its own
    tokenizer's pad id (``reward_pad_id``). The engine actors are created first, without waiting.

    ``colocate_all`` on GPUs: engines created -> ready -> asleep, and only then the worker groups (each
    ``WorkerGroup`` blocks in ``init_process_group``, where NCCL with ``device_id`` allocates device memory
    eagerly: ``deepspeed/comm/torch.py`` ~276-282) and their DeepSpeed setups. vLLM profiles free memory while it
    starts (``v1/worker/gpu_worker.py`` ~716-728) and refuses to start below ``gpu_memory_utilization`` x total,
    so nothing of DeepSpeed's may be on the devices before every engine sleeps. The devices then are in the
    TRAINING phase of :mod:`reasonrl.distributed.phases`.

    Otherwise (split placement, or CPU where there is no such check and sleep is simulated) the engines' start-up
    overlaps the groups' rendezvous and setups (a tiny CPU run starts ~15 s sooner on 2 cores); colocated CPU
    engines are put to sleep afterwards, the phase machine's starting state."""
    import ray

    from reasonrl.loop.trainer import Roles

    engines = start_vllm_engines(cfg, plan["vllm"], stack)
    ready = [e.ready.remote() for e in engines]
    if cfg.colocate_all and plan.device == "gpu":
        ray.get(ready)
        ray.get([e.sleep.remote(cfg.engine_sleep_level) for e in engines])
        groups, setups = start_worker_groups(cfg, stack, plan, num_steps, pad_token_id, reward_pad_id)
        ray.get(setups)
    else:
        groups, setups = start_worker_groups(cfg, stack, plan, num_steps, pad_token_id, reward_pad_id)
        ray.get(ready + setups)
        if cfg.colocate_all:
            ray.get([e.sleep.remote(cfg.engine_sleep_level) for e in engines])  # the phase machine's start
    _log_attention(groups)
    return Roles(
        policy=groups["policy"],
        engines=engines,
        ref=groups.get("ref"),
        critic=groups.get("critic"),
        reward_model=groups.get("reward"),
        teacher=groups.get("teacher"),
    )


def start_worker_groups(
    cfg: BasePPOExpConfig,
    stack: contextlib.ExitStack,
    plan,
    num_steps: int,
    pad_token_id: int,
    reward_pad_id: int | None = None,
) -> tuple[dict[str, Any], list]:
    """The DeepSpeed roles of ``plan`` (policy, ref, teacher, critic, reward model), each a ``WorkerGroup`` registered
    for shutdown; returns ``(groups by role, refs of their setups)``. Constructing a group joins its process group
    (blocking); the setups are sent, not awaited."""
    from reasonrl.distributed.ppo_workers import CriticWorker, PolicyWorker, ReferenceWorker, RewardModelWorker
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.run.role_settings import worker_config

    # the distillation teacher is a frozen reference-class group loaded from teacher_pretrain
    classes = {
        "policy": PolicyWorker,
        "ref": ReferenceWorker,
        "teacher": ReferenceWorker,
        "critic": CriticWorker,
        "reward": RewardModelWorker,
    }
    groups: dict[str, Any] = {}
    setups: list = []
    for role, cls in classes.items():
        if role in plan:
            groups[role] = WorkerGroup(cls, plan[role], name=role)
            stack.callback(logged, groups[role].kill)
            pad = reward_pad_id if role == "reward" and reward_pad_id is not None else pad_token_id
            # attn_implementation travels unresolved: each worker resolves "auto" where it runs
            worker_cfg = worker_config(cfg, role, num_rollout_steps=num_steps, pad_token_id=pad)
            setups += groups[role].call_async("setup", worker_cfg)
    return groups, setups


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
        # LoRA, adapter-only sync: vLLM's LoRA support with one adapter slot (a sync waits for the rollouts launched
        # before it, so no request of an older version is ever added after it)
        lora_rank=cfg.lora_rank if cfg.use_lora and cfg.lora_sync == "adapter" else 0,
        lora_versions=1,
        max_images_per_prompt=cfg.max_images_per_prompt if cfg.is_vision_model else 0,
        extra_engine_kwargs={} if cfg.vllm_max_num_seqs is None else {"max_num_seqs": cfg.vllm_max_num_seqs},
    )
    stack.callback(logged, lambda: _shutdown_engines(engines))
    return engines


# ---------------------------------------------------------------------- cleanup
def logged(fn) -> None:
    """Run one cleanup of an exit stack; a failing cleanup is logged and the others still run (each one's time at
    DEBUG level: where a run's exit spends its seconds)."""
    start = time.perf_counter()
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - keep cleaning up the rest
        logger.warning(f"cleanup {getattr(fn, '__qualname__', fn)} failed: {err}")
    logger.debug(f"cleanup {getattr(fn, '__qualname__', fn)}: {time.perf_counter() - start:.2f}s")


def _shutdown_engines(engines) -> None:
    import ray

    try:
        ray.get([e.shutdown.remote(process_exits=True) for e in engines], timeout=120)
    finally:
        for engine in engines:
            ray.kill(engine)

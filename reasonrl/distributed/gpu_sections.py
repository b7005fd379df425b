"""The GPU-only sections of ``python -m reasonrl.gpu_check`` (issue 39, item 8): each runs only where its GPUs
exist and otherwise reports SKIP with the reason. Small on purpose: a random Qwen2.5-0.5B-shaped model, a few
short rollouts, two verified syncs per section.

* ``lora_adapter_sleep`` (1 GPU): ``lora_sync=adapter``. An engine with LoRA and sleep mode, a LoRA policy, two
  adapter syncs across a level-1 sleep: the first adapter's probe log-probs survive the sleep (vLLM keeps LoRA slots
  in the "weights" pool a level-1 sleep backs up: ``v1/worker/gpu_worker.py`` ~587-592), the second registers as
  version 2 (``list_loras``) and the probe moves as the trainer's does (``AdapterSyncer``'s differential check).
* ``vision_sync`` (1 GPU): a vision-language policy (the tiny Idefics3, random weights) synced over CUDA IPC in
  small buckets (every bucket ends between the engine's reload units, vision blocks included), checked exactly
  and by the sync's probe, which carries the picture (``sync_probe``); then the engine samples on the picture with
  log-probs and the trainer scores the same tokens on the same picture, within the agreement bound (a vision tower
  loaded in part would be uninitialised memory).
* ``tp2_ipc`` (2 GPUs): ``colocate_all`` with a 2-rank policy and one engine at tensor-parallel size 2, both syncs
  over CUDA IPC (each vLLM worker rebuilds its own policy rank's bucket; a GPU mismatch is refused by the handles'
  device UUID), checked exactly and by the probe.
* ``broadcast_gather`` (2 GPUs): the NCCL broadcast group of split placement: a 2-rank ZeRO-3 policy (one rank per
  GPU) gathers every bucket to rank 0 (the multi-rank gather), which broadcasts it to an engine on the other GPU
  (no GPU holds two ranks of the group), checked exactly and by the probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loguru import logger

DEVICE = "gpu"
"""Where the sections' actors run. Only tests change it ("cpu" with fake GPU resources: a dry run of the code path,
not of the GPU)."""
PROBE_TOKENS = 48
ENGINE_SHARE = 0.3  # gpu_memory_utilization of each section's engine
AGREEMENT_BOUND = 1.0  # nats, bf16 engine vs trainer on identical weights (gpu_check's bound)
SECTIONS: tuple[tuple[str, int], ...] = (
    ("lora_adapter_sleep", 1),
    ("vision_sync", 1),
    ("tp2_ipc", 2),
    ("broadcast_gather", 2),
)
"""(name, GPUs needed) of every section, in the order they run."""


class SectionSkipped(Exception):
    """A section whose GPUs are not here; its message is the reason."""


def skip_reason(needed: int, on_gpu: bool, visible: int) -> str | None:
    """Why a section needing ``needed`` GPUs cannot run here, or None when it can."""
    if not on_gpu:
        return "GPU-only (no CUDA device, or --cpu)"
    if visible < needed:
        return f"needs {needed} GPUs, {visible} visible"
    return None


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def sections(on_gpu: bool, model_path: str | None, lr: float = 1e-5) -> list[tuple[str, Callable[[], str]]]:
    """``(name, check)`` per section; a check raises :class:`SectionSkipped` where its GPUs are missing and starts
    (or restarts) Ray with every visible GPU when it needs more than the running instance has."""
    visible = visible_gpus() if on_gpu else 0
    bodies = {
        "lora_adapter_sleep": _lora_adapter_sleep,
        "vision_sync": _vision_sync,
        "tp2_ipc": _tp2_ipc,
        "broadcast_gather": _broadcast_gather,
    }

    def check(name: str, needed: int) -> Callable[[], str]:
        def run() -> str:
            reason = skip_reason(needed, on_gpu, visible)
            if reason:
                raise SectionSkipped(reason)
            _ray_with_gpus(needed, visible)
            return bodies[name](_Run(model_path=model_path, lr=lr))

        return run

    return [(name, check(name, needed)) for name, needed in SECTIONS]


# ---------------------------------------------------------------------- shared pieces
@dataclass
class _Run:
    model_path: str
    lr: float
    seed: int = 0


@dataclass
class _Share:
    """A duck-typed ``RolePlacement`` (what ``WorkerGroup`` needs): rank ``r`` gets ``options_of(r)``."""

    options_of: Callable[[int], dict]
    num_actors: int

    def actor_options(self, rank: int) -> dict:
        return self.options_of(rank)


def _ray_with_gpus(needed: int, visible: int) -> None:
    import ray

    if ray.is_initialized() and ray.cluster_resources().get("GPU", 0) >= needed:
        return
    if ray.is_initialized():  # gpu_check's own one-GPU instance
        ray.shutdown()
    ray.init(num_cpus=4 * visible, num_gpus=visible, include_dashboard=False)


def _env() -> dict[str, str]:
    from reasonrl.distributed.platform import DEVICE_ENV_VAR

    return {DEVICE_ENV_VAR: DEVICE}


def _worker_config(run: _Run, **extra: Any):
    from reasonrl.distributed.ppo_workers import WorkerConfig

    return WorkerConfig(
        model_path=run.model_path, bf16=True, lr=run.lr, seed=run.seed, attn_implementation="auto", **extra
    )


def _probe_and_prompts(seed: int) -> tuple[list[int], list[list[int]]]:
    import torch

    g = torch.Generator().manual_seed(seed)
    probe = torch.randint(3, 2048, (PROBE_TOKENS,), generator=g).tolist()
    return probe, [torch.randint(3, 2048, (8,), generator=g).tolist() for _ in range(2)]


def _update(policy, engine, prompts: list[list[int]], seed: int) -> None:
    """One policy update on the engine's rollout of ``prompts`` (alternating advantages: the weights move)."""
    import ray
    import torch

    from reasonrl.algos.loss_settings import PolicyLossConfig
    from reasonrl.dataplane.experience import Experience
    from reasonrl.distributed.vllm_engine import SamplingConfig
    from reasonrl.models import pad_batch

    ranks = policy.world_size
    sampling = SamplingConfig(n=2 * ranks, temperature=1.0, max_tokens=16, seed=seed)
    samples = [(c.prompt_token_ids, c.token_ids) for c in ray.get(engine.generate.remote(prompts, sampling))]
    mask = pad_batch(samples, 0).action_mask
    old = policy.call_sharded("compute_logprobs", [samples] * ranks)[0][0]  # collective: every rank runs it
    sign = torch.where(torch.arange(len(samples))[:, None] % 2 == 0, 1.0, -1.0).expand_as(old)
    exp = Experience(samples, mask, old_logprobs=old, advantages=sign * mask)
    policy.call_sharded("update", exp.shard(ranks), PolicyLossConfig(), *exp.num_tokens_and_seqs())


def _max_diff(a, b) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _shutdown(engines, groups, plan=None) -> None:
    import ray

    for group in groups:
        if group is not None:
            group.kill()
    for engine in engines:
        try:
            ray.get(engine.shutdown.remote(), timeout=120)
        except Exception as exc:  # noqa: BLE001 - a dead engine: the section's own error is the one to report
            logger.warning(f"gpu_check section cleanup: engine shutdown failed: {exc}")
        finally:
            ray.kill(engine)
    if plan is not None:
        plan.remove()


def _synced_twice(syncer, policy, engine, probe, prompts, seed) -> str:
    """Sync, update, sync again (each load checked exactly, each verify by the probe); the probe must move."""
    import ray

    first = syncer.run(probe)
    before = ray.get(engine.prompt_logprobs.remote(probe))
    _update(policy, engine, prompts, seed)
    second = syncer.run(probe)
    moved = _max_diff(ray.get(engine.prompt_logprobs.remote(probe)), before)
    if moved == 0:
        raise AssertionError("the engine's probe did not move after an update and a sync")
    return (
        f"{syncer.transport}: 2 syncs, {first.params_checked} and {second.params_checked} parameters checked "
        f"exactly, probe change diff {second.probe_max_abs_diff:.3g}, engine probe moved {moved:.3g}"
    )


# ---------------------------------------------------------------------- sections
def _lora_adapter_sleep(run: _Run) -> str:
    import ray

    from reasonrl.distributed.adapter_sync import AdapterSyncer
    from reasonrl.distributed.ppo_workers import PolicyWorker
    from reasonrl.distributed.vllm_engine import create_vllm_engines
    from reasonrl.distributed.worker_group import WorkerGroup

    rank = 8
    probe, prompts = _probe_and_prompts(run.seed)
    (engine,) = create_vllm_engines(
        1,
        run.model_path,
        env=_env(),
        dtype="bfloat16",
        max_model_len=256,
        gpu_memory_utilization=ENGINE_SHARE,
        enable_sleep_mode=True,
        lora_rank=rank,
        num_cpus=1,
        num_gpus=0.4,
    )
    policy = None
    try:
        ray.get(engine.ready.remote(), timeout=600)
        share = _Share(lambda r: {"num_cpus": 1, "num_gpus": 0.4, "runtime_env": {"env_vars": _env()}}, 1)
        policy = WorkerGroup(PolicyWorker, share, timeout_s=600)
        policy.call("setup", _worker_config(run, lora_rank=rank))
        syncer = AdapterSyncer(policy, [engine], tol=0.1, exact=False)
        syncer.run(probe)
        served = ray.get(engine.prompt_logprobs.remote(probe))
        ray.get(engine.sleep.remote(1))  # level 1: the weights pool (LoRA slots included) is backed up
        ray.get(engine.wake_up.remote(None))
        kept = _max_diff(ray.get(engine.prompt_logprobs.remote(probe)), served)
        if kept > 1e-2:
            raise AssertionError(f"the adapter did not survive a level-1 sleep: probe changed by {kept:.3g}")
        _update(policy, engine, prompts, run.seed)
        second = syncer.run(probe)
        (registered,) = syncer.registered
        if syncer.version not in registered:
            raise AssertionError(f"adapter version {syncer.version} not registered (list_loras: {registered})")
        moved = _max_diff(ray.get(engine.prompt_logprobs.remote(probe)), served)
        if moved == 0:
            raise AssertionError("the second adapter did not move the engine's probe")
        return (
            f"rank {rank}: adapter survived the level-1 sleep (probe within {kept:.3g}); version "
            f"{syncer.version} registered ({registered}); probe change diff {second.probe_max_abs_diff:.3g}, "
            f"engine probe moved {moved:.3g}"
        )
    finally:
        _shutdown([engine], [policy])


def _pinned(pg, bundle: int) -> dict:
    """Actor options of one GPU share in bundle ``bundle`` of ``pg`` (processes that must share a GPU: CUDA IPC)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle)
    return {"num_cpus": 1, "num_gpus": 0.4, "runtime_env": {"env_vars": _env()}, "scheduling_strategy": strategy}


def _syncer(policy, engines, transport: str, bucket_bytes: int = 64 * 2**20):
    """The sections' weight syncer: bf16 engines (the probe's 0.1-nat floor, calibrated by the first sync), the
    training model's forward as the trainer side (cheap over NCCL)."""
    from reasonrl.distributed.weight_sync import WeightSyncer

    return WeightSyncer(
        policy,
        engines,
        bucket_bytes=bucket_bytes,
        tol=0.1,
        exact=False,
        transport=transport,
        verify_with="trainer_forward",
        device=DEVICE,
    )


def _vision_sync(run: _Run) -> str:
    import numpy as np
    import ray
    from ray.util.placement_group import placement_group

    from reasonrl.distributed.ppo_workers import PolicyWorker
    from reasonrl.distributed.sync_probe import ProbeInput
    from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.models.tiny_vlm import tiny_vlm_path
    from reasonrl.models.vision import image_placeholder, load_processor

    path = str(tiny_vlm_path())
    processor = load_processor(path)
    picture = np.random.default_rng(run.seed).integers(0, 256, (56, 56, 3), dtype=np.uint8)
    # one placeholder, as the rollout writes it (loop/generation.py encode): vLLM expands it into the image tokens
    prompt = processor.tokenizer(f"{image_placeholder(processor)}what is it", add_special_tokens=False).input_ids
    probe = [int(t) for t in processor.tokenizer("the weight sync probe: one plus one is two")["input_ids"]]
    pg = placement_group([{"GPU": 1, "CPU": 2}])  # one GPU for both: CUDA IPC needs the same device
    ray.get(pg.ready(), timeout=120)
    engines, policy = [], None
    try:
        engines = create_vllm_engines(
            1,
            path,
            placement_group=pg,
            bundle_indices=[0],
            num_cpus=1,
            num_gpus=0.4,
            env=_env(),
            dtype="bfloat16",
            max_model_len=256,
            gpu_memory_utilization=ENGINE_SHARE,
            max_images_per_prompt=1,
        )
        ray.get([e.ready.remote() for e in engines], timeout=600)
        policy = WorkerGroup(PolicyWorker, _Share(lambda r: _pinned(pg, 0), 1), timeout_s=600)
        policy.call("setup", _worker_config(_Run(model_path=path, lr=run.lr, seed=run.seed)))
        syncer = _syncer(policy, engines, "ipc", bucket_bytes=256 * 2**10)
        report = syncer.run(ProbeInput(prompt + probe, [picture]))  # the probe reaches the vision tower too
        sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=16, seed=run.seed, logprobs=True)
        rollout = ray.get(engines[0].generate.remote([prompt], sampling, [[picture]]))
        samples = [(c.prompt_token_ids, c.token_ids) for c in rollout]  # image tokens as vLLM expanded them
        scored = policy.call_sharded("compute_logprobs", [samples], 1.0, False, [[picture]] * len(samples))[0][0]
        diff = max(
            abs(float(scored[i][t]) - c.logprobs[t]) for i, c in enumerate(rollout) for t in range(len(c.token_ids))
        )
        if not diff < AGREEMENT_BOUND:
            raise AssertionError(f"on the probe picture max |vLLM - DeepSpeed| = {diff:.3g} nats >= {AGREEMENT_BOUND}")
        return (
            f"{report.num_buckets} buckets over ipc, {report.params_checked} parameters checked exactly, the "
            f"probe's {report.probe_tokens} tokens with its picture within {report.probe_max_abs_diff:.3g}; on the "
            f"probe picture max |vLLM - DeepSpeed| {diff:.3g} nats over {sum(len(c.token_ids) for c in rollout)} "
            "sampled tokens"
        )
    finally:
        _shutdown(engines, [policy])
        ray.util.remove_placement_group(pg)


def _tp2_ipc(run: _Run) -> str:
    import ray

    from reasonrl.distributed.placement import build_placement
    from reasonrl.distributed.ppo_workers import PolicyWorker
    from reasonrl.distributed.vllm_engine import create_vllm_engines
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.planning.placement_layout import RoleResources, VLLMResources

    probe, prompts = _probe_and_prompts(run.seed)
    plan = build_placement(
        {"policy": RoleResources(1, 2), "vllm": VLLMResources(1, 2)}, colocate_all=True, device=DEVICE
    )
    engines, policy = [], None
    try:
        engines = create_vllm_engines(
            1,
            run.model_path,
            placement=plan["vllm"],
            dtype="bfloat16",
            max_model_len=256,
            tensor_parallel_size=2,
            gpu_memory_utilization=ENGINE_SHARE,
        )
        ray.get([e.ready.remote() for e in engines], timeout=900)  # engines first, as colocate_all starts
        policy = WorkerGroup(PolicyWorker, plan["policy"], timeout_s=600)
        policy.call("setup", _worker_config(run))
        syncer = _syncer(policy, engines, "ipc")
        return "TP 2, 2 policy ranks: " + _synced_twice(syncer, policy, engines[0], probe, prompts, run.seed)
    finally:
        _shutdown(engines, [policy], plan)


def _broadcast_gather(run: _Run) -> str:
    import ray
    from ray.util.placement_group import placement_group

    from reasonrl.distributed.ppo_workers import PolicyWorker
    from reasonrl.distributed.vllm_engine import create_vllm_engines
    from reasonrl.distributed.worker_group import WorkerGroup

    probe, prompts = _probe_and_prompts(run.seed)
    pg = placement_group([{"GPU": 1, "CPU": 2}, {"GPU": 1, "CPU": 2}], strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=120)
    engines, policy = [], None
    try:
        # the engine on GPU 1 beside policy rank 1: the broadcast group (rank 0 + the engine worker) spans 2 GPUs
        engines = create_vllm_engines(
            1,
            run.model_path,
            placement_group=pg,
            bundle_indices=[1],
            num_cpus=1,
            num_gpus=0.4,
            env=_env(),
            dtype="bfloat16",
            max_model_len=256,
            gpu_memory_utilization=ENGINE_SHARE,
        )
        ray.get([e.ready.remote() for e in engines], timeout=600)
        policy = WorkerGroup(PolicyWorker, _Share(lambda r: _pinned(pg, r), 2), timeout_s=600)
        policy.call("setup", _worker_config(run))
        syncer = _syncer(policy, engines, "broadcast")
        return f"{syncer.backend}, 2-rank gather to rank 0: " + _synced_twice(
            syncer, policy, engines[0], probe, prompts, run.seed
        )
    finally:
        _shutdown(engines, [policy])
        ray.util.remove_placement_group(pg)

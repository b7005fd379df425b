"""GPU smoke test: the first command to run on a machine with one CUDA GPU (``python -m reasonrl.gpu_check``).

It puts one vLLM engine and one DeepSpeed ZeRO-3 policy on the same GPU (engine first and asleep at level 2, as
``colocate_all`` starts), on a random model with Qwen2.5-0.5B's shape built locally (no download), in bf16, and walks
the real device phases (``PhaseMachine``: sleep / wake of the engine, offload / reload of the policy) with the
trainer's colocated sync order (SYNC -> load over CUDA IPC + exact fingerprint check -> GENERATION -> probe):

A frozen reference and a critic share the GPU too, and every role resolves its attention itself
(``attn_implementation=auto``: flash-attn with packed micro-batches where it imports, sdpa otherwise).

1. ``agreement``: the first sync, then bf16 prompt log-probs of a probe, vLLM vs the DeepSpeed policy, on identical
   weights (kernel noise only; reported, and must stay below 1 nat, the sync check's sanity bound), and the
   reference against the policy (identical weights, same kernels);
2. ``grpo_steps``: two GRPO steps of the real components (generate -> TRAINING -> group-normalised advantages ->
   policy update, reference log-probs, critic values and one critic update -> the verified sync above);
3. ``missed_sync``: generating after a level-2 sleep without a sync is refused, and one more update the engine
   never receives is caught by the differential probe check;
4. ``memory``: measured device memory per phase against the per-phase memory model
   (``reasonrl.planning.memory_model``, ``docs/memory.md``) for this run's :class:`Setup` (:func:`run_setup`):

   * ``engine``: device-wide use (``torch.cuda.mem_get_info`` in the driver) after ``engine.ready`` minus the
     baseline before the engine started; modelled ``vllm_engine_bytes`` (``gpu_memory_utilization x device`` and
     the CUDA context of the engine's actor, outside that budget);
   * ``policy_state``: the policy worker's ``memory_allocated`` after ``setup``; modelled ``param_bytes +
     train_state_bytes`` (parameters, fp32 gradients, master weights, Adam m and v);
   * ``training_peak``: the worker's ``max_memory_allocated`` over the two GRPO steps (peak reset before them);
     modelled ``policy_state + gather_bytes + max(activation_bytes, sync bucket)`` at the largest micro-batch the
     steps ran;
   * ``phase generation / training / sync``: device-wide use on entering each device phase against
     ``colocated_phase_bytes`` of the same setup with sleep mode on, a reference and a critic (with the CUDA
     contexts of every process on the GPU and, in sync, vLLM's CUDA-graph pool).

   The model is an upper bound: a phase FAILS when ``measured > modelled x MEMORY_SLACK_RATIO``
   (:func:`compare_memory`; no fixed slack: what a fixed 1 GiB stood for, the CUDA contexts, is in the model);
   every phase prints measured, modelled and their ratio.
   Skipped on CPU.

5. GPU-only sections (:func:`run_sections`, :mod:`reasonrl.distributed.gpu_sections`): ``lora_adapter_sleep`` (two
   adapter syncs across a level-1 sleep), ``vision_sync`` (a VLM synced in small buckets, then engine and trainer
   on the probe picture), and on 2+ GPUs ``tp2_ipc`` (TP 2 under colocate_all over CUDA IPC) and
   ``broadcast_gather`` (the NCCL broadcast group fed by a 2-rank gather); each SKIP, saying why, where its GPUs
   are missing.

Prints PASS / FAIL per check and exits 1 on any failure, 2 when no CUDA GPU is visible (unless ``--cpu``: the same
checks on the tiny model on CPU, which the test suite runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reasonrl.models.tiny import TinyModelSpec
from reasonrl.planning.memory_model import (
    ModelShape,
    Setup,
    activation_bytes,
    colocated_phase_bytes,
    gather_bytes,
    param_bytes,
    train_state_bytes,
    vllm_engine_bytes,
)

# Qwen2.5-0.5B's architecture (config.json of the Hub model); the weights are random.
QWEN2P5_0P5B_SHAPE = TinyModelSpec(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
AGREEMENT_BOUND = 1.0  # nats: above this the engine and the trainer do not hold the same model
VLLM_GPU_MEMORY_UTILIZATION = 0.3  # the engine's share of the GPU; the rest is the policy's
SYNC_BUCKET_MB = 64
GIB = 2**30
MEMORY_SLACK_RATIO = 1.25
"""The memory model's formulas are upper bounds, but approximate ones (a HF layer may keep more than ``8 h + 4 I``
values per token for its fp32 RMSNorm and rotary intermediates; DeepSpeed's ZeRO-3 optimizer step upcasts a
sub-group's bf16 gradients to fp32 while the bf16 buffer is still allocated), and allocator rounding and caches:
25 % for what they understate. The CUDA contexts (inside every device-wide figure) and vLLM's CUDA-graph pool are
terms of the model itself (``memory_model.CUDA_CONTEXT_BYTES``, ``Setup.vllm_cuda_graph_bytes``), not slack."""


@dataclass
class CheckResult:
    name: str
    passed: bool | None  # None = skipped
    detail: str

    def line(self) -> str:
        status = "SKIP" if self.passed is None else ("PASS" if self.passed else "FAIL")
        return f"[{status}] {self.name}: {self.detail}"


@dataclass
class _Placement:
    """The duck-typed ``RolePlacement`` WorkerGroup needs: one actor, sharing the GPU with the engine."""

    options: dict
    num_actors: int = 1

    def actor_options(self, rank: int) -> dict:
        return dict(self.options)


def model_shape(spec: TinyModelSpec) -> ModelShape:
    """The memory model's view of a model built from ``spec`` (both are Qwen2 layouts)."""
    return ModelShape(
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        intermediate_size=spec.intermediate_size,
        vocab_size=spec.vocab_size,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        tie_word_embeddings=spec.tie_word_embeddings,
    )


def run_setup(
    device_bytes: int, micro_batch_tokens: int, *, zero_stage: int, bf16: bool, gradient_checkpointing: bool
) -> Setup:
    """The memory model's :class:`Setup` of a GPU run of this check: Qwen2.5-0.5B's shape, one policy rank (no
    critic, reference or reward model), one vLLM engine at :data:`VLLM_GPU_MEMORY_UTILIZATION` that never sleeps,
    on a device of ``device_bytes``; ``micro_batch_tokens`` = the largest micro-batch the steps ran."""
    return Setup(
        model=model_shape(QWEN2P5_0P5B_SHAPE),
        zero_stage=zero_stage,
        policy_dp=1,
        bf16=bf16,
        gradient_checkpointing=gradient_checkpointing,
        micro_batch_tokens=micro_batch_tokens,
        vllm_gpu_memory_utilization=VLLM_GPU_MEMORY_UTILIZATION,
        vllm_enable_sleep=False,
        colocate_all=True,
        sync_bucket_mb=SYNC_BUCKET_MB,
        device_bytes=device_bytes,
    )


def predicted_phase_bytes(s: Setup) -> dict[str, int]:
    """Modelled bytes of each measured phase (module docstring, item 4): ``engine`` (device-wide: its budget and the
    context of its actor), ``policy_state`` (one rank's ZeRO partitions and training states) and ``training_peak``
    (that plus the larger of one micro-batch's gathers + activations and one sync bucket's gathers); the last two
    are the worker's allocator figures, which no CUDA context is part of."""
    state = param_bytes(s, s.policy_dp) + train_state_bytes(s, s.policy_dp)
    transient = gather_bytes(s) + max(activation_bytes(s, trains=True, logits=True), s.sync_bucket_mb * 2**20)
    return {"engine": vllm_engine_bytes(s), "policy_state": state, "training_peak": state + transient}


def largest_micro_batch_tokens(samples: Sequence[tuple[list[int], list[int]]], max_tokens: int) -> int:
    """Tokens of the largest micro-batch the policy runs on ``samples``: the padded ``[count, P+T]`` grid of each
    micro-batch of :func:`reasonrl.models.plan_micro_batches` (padded layout: ``WorkerConfig.packing`` off)."""
    from reasonrl.models import padded_grid_tokens, plan_micro_batches

    lengths = [len(p) + len(r) for p, r in samples]
    batches = plan_micro_batches(lengths, max_tokens, padded=True, prompt_lengths=[len(p) for p, _ in samples])
    return max((padded_grid_tokens([samples[i] for i in b]) for b in batches), default=0)


def compare_memory(
    rows: Sequence[tuple[str, int, int]], slack_ratio: float = MEMORY_SLACK_RATIO
) -> tuple[bool, list[str]]:
    """Measured vs modelled device memory, one ``(phase, measured bytes, modelled bytes)`` row per phase; the
    modelled figure is the memory model's, CUDA contexts and CUDA-graph pool included where the measurement holds
    them.

    The model is an upper bound: a phase fails when ``measured > modelled * slack_ratio``; a phase the model has no
    figure for (0) fails. Returns (every phase within its bound, one line per phase: measured, modelled,
    measured/modelled and the verdict).
    """
    passed, lines = True, []
    for phase, measured, modelled in rows:
        bound = modelled * slack_ratio
        within = measured <= bound
        passed = passed and within
        ratio = f"{measured / modelled:.2f}" if modelled > 0 else "n/a"
        lines.append(
            f"{phase}: measured {measured / GIB:.2f} GiB, modelled {modelled / GIB:.2f} GiB, "
            f"measured/modelled {ratio} ({'within' if within else 'OVER'} the bound {bound / GIB:.2f} GiB)"
        )
    return passed, lines


class _Skip(Exception):
    """A check that does not apply here."""


def _run(name: str, fn: Callable[[], str], results: list[CheckResult]) -> bool:
    try:
        results.append(CheckResult(name, True, fn()))
        return True
    except _Skip as skip:
        results.append(CheckResult(name, None, str(skip)))
        return True
    except Exception as exc:  # every failure becomes a FAIL line, never a traceback without a verdict
        results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}"))
        return False


def run_checks(on_gpu: bool, lr: float = 1e-5, seed: int = 0) -> list[CheckResult]:
    """Run every check (Ray is started here if it is not running). Returns one result per check."""
    import asyncio

    import ray
    import torch

    from reasonrl.algos.loss_settings import PolicyLossConfig, ValueLossConfig
    from reasonrl.dataplane.experience import Experience
    from reasonrl.distributed.phases import SLEEP_LEVEL, Phase, PhaseMachine
    from reasonrl.distributed.platform import DEVICE_ENV_VAR
    from reasonrl.distributed.ppo_workers import CriticWorker, PolicyWorker, ReferenceWorker, WorkerConfig
    from reasonrl.distributed.sync_checks import DifferentialProbe, WeightSyncError
    from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
    from reasonrl.distributed.weight_sync import WeightSyncer, resolve_transport, resolve_verify_source
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.models import pad_batch
    from reasonrl.models.tiny import tiny_model_path

    device = "gpu" if on_gpu else "cpu"
    model_path = str(tiny_model_path(QWEN2P5_0P5B_SHAPE if on_gpu else TinyModelSpec()))
    if not ray.is_initialized():
        ray.init(num_cpus=4, num_gpus=1 if on_gpu else 0, include_dashboard=False)
    env = {DEVICE_ENV_VAR: device}
    share = {"num_cpus": 1, "num_gpus": 0.25} if on_gpu else {"num_cpus": 0.5}  # engine, policy, ref, critic
    results: list[CheckResult] = []

    def device_used() -> int:
        """Device-wide bytes in use (every process on the GPU), as the driver sees them."""
        free, total = torch.cuda.mem_get_info()
        return total - free

    measured: dict[str, int] = {}  # phase -> bytes, filled on GPU (module docstring, item 4)
    phase_used: dict[Phase, int] = {}  # device phase -> largest device-wide bytes seen in it (GPU)
    micro_batch_tokens: list[int] = []  # per GRPO step, its largest micro-batch
    critic_losses: list[float] = []  # per GRPO step, the critic's mean squared error (before its update)
    baseline = device_used() if on_gpu else 0
    (engine,) = create_vllm_engines(
        1,
        model_path,
        env=env,
        dtype="bfloat16",
        max_model_len=256,
        gpu_memory_utilization=VLLM_GPU_MEMORY_UTILIZATION,
        **share,
    )
    policy = ref = critic = None
    try:
        ray.get(engine.ready.remote(), timeout=600)  # engine first: vLLM needs its memory share free at start-up
        if on_gpu:
            measured["engine"] = device_used() - baseline
        ray.get(engine.sleep.remote(SLEEP_LEVEL))  # as colocate_all starts: the engine asleep before DeepSpeed
        # attention and packing resolved on the worker: flash-attn with packed micro-batches (cu_seqlens passed)
        # where flash_attn imports on a GPU, sdpa and padding otherwise
        config = WorkerConfig(
            model_path=model_path, bf16=True, lr=lr, seed=seed, attn_implementation="auto", packing="auto"
        )
        placement = _Placement(share | {"runtime_env": {"env_vars": env}})
        policy = WorkerGroup(PolicyWorker, placement, timeout_s=600)
        policy.call("setup", config)
        state = policy.call("device_memory")[0]  # None without CUDA
        if state is not None:
            measured["policy_state"] = state["memory_allocated"]
        ref = WorkerGroup(ReferenceWorker, placement, timeout_s=600)
        critic = WorkerGroup(CriticWorker, placement, timeout_s=600)
        ref.call("setup", config)
        critic.call("setup", config)
        attention = policy.call("attention")[0]
        phases = PhaseMachine([engine], {"policy": policy, "critic": critic, "ref": ref}, active=True)
        g = torch.Generator().manual_seed(seed)
        probe = torch.randint(3, 2048, (48,), generator=g).tolist()
        prompts = [torch.randint(3, 2048, (8,), generator=g).tolist() for _ in range(4)]
        syncer = WeightSyncer(  # the GPU defaults under colocation: CUDA IPC (shared memory on CPU), trainer probe
            policy,
            [engine],
            bucket_bytes=SYNC_BUCKET_MB * 2**20,
            tol=0.1,
            exact=False,
            transport=resolve_transport("auto", "gpu", colocated=True),
            verify_with=resolve_verify_source("auto", device),
            device=device,
        )

        def enter(phase: Phase) -> None:
            asyncio.run(phases.enter(phase))
            if on_gpu:
                phase_used[phase] = max(phase_used.get(phase, 0), device_used() - baseline)

        def sync():
            """The trainer's colocated order: SYNC -> load + exact check -> GENERATION -> probe."""
            enter(Phase.SYNC)
            report = asyncio.run(syncer.load(probe))
            phases.synced()
            enter(Phase.GENERATION)
            return asyncio.run(syncer.verify(probe, report))

        def trainer_lps() -> list[float]:
            return policy.call("compute_logprobs", [(probe[:1], probe[1:])])[0][0][0].tolist()

        def engine_lps() -> list[float]:
            return ray.get(engine.prompt_logprobs.remote(probe))

        def update(samples, adv) -> None:
            mask = pad_batch(samples, 0).action_mask
            old = policy.call_sharded("compute_logprobs", [samples])[0][0]
            exp = Experience(samples, mask, old_logprobs=old, advantages=adv(old) * mask)
            policy.call_sharded("update", exp.shard(1), PolicyLossConfig(), *exp.num_tokens_and_seqs())

        def agreement() -> str:
            first = sync()  # the engine slept at level 2: load the (unchanged) weights; calibrates the probe
            trainer = trainer_lps()
            diff = max(abs(a - b) for a, b in zip(engine_lps(), trainer, strict=True))
            if not diff < AGREEMENT_BOUND:
                raise AssertionError(f"max |vLLM - DeepSpeed| = {diff:.3g} nats >= {AGREEMENT_BOUND}")
            reference = ref.call("compute_logprobs", [(probe[:1], probe[1:])])[0][0].tolist()
            ref_diff = max(abs(a - b) for a, b in zip(reference, trainer, strict=True))
            if not ref_diff < 1e-2:  # same weights, same kernels: the frozen copy must score like the policy
                raise AssertionError(f"max |reference - policy| = {ref_diff:.3g} on identical weights")
            return (
                f"attention {attention['attn_implementation']} (packing {attention['packing']}); "
                f"max |reference - policy| {ref_diff:.3g}; "
                f"max |vLLM - DeepSpeed| bf16 log-prob on a {len(probe)}-token probe = {diff:.3g} nats; first sync "
                f"({syncer.transport}) {first.num_bytes / GIB:.2f} GiB in {first.total_s:.2f} s, "
                f"{first.params_checked} parameters checked exactly"
            )

        def grpo_step(i: int):
            sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=16, seed=seed + i)
            rollout = ray.get(engine.generate.remote(prompts, sampling))
            samples = [(c.prompt_token_ids, c.token_ids) for c in rollout]
            micro_batch_tokens.append(largest_micro_batch_tokens(samples, config.max_tokens_per_micro_batch))
            reward = torch.tensor([float(len(set(c.token_ids))) for c in rollout]).view(len(prompts), -1)
            adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).flatten()
            enter(Phase.TRAINING)
            update(samples, lambda old: adv[:, None].expand_as(old))
            ref_lps = ref.call_sharded("compute_logprobs", [samples])[0]
            values = critic.call_sharded("compute_values", [samples])[0]
            mask = pad_batch(samples, 0).action_mask
            returns = reward.flatten()[:, None].expand_as(values) * mask  # the outcome reward at every token
            exp = Experience(samples, mask, old_values=values, returns=returns)
            (value_metrics,) = critic.call_sharded(
                "update", exp.shard(1), ValueLossConfig(), *exp.num_tokens_and_seqs()
            )
            if not (torch.isfinite(ref_lps).all() and torch.isfinite(values).all()):
                raise AssertionError("non-finite reference log-probs or critic values")
            critic_losses.append(float(value_metrics["vf_error"]))
            return sync()

        def grpo_steps() -> str:
            policy.call("device_memory", reset_peak=True)
            reports = [grpo_step(i) for i in range(2)]
            peak = policy.call("device_memory")[0]
            if peak is not None:
                measured["training_peak"] = peak["max_memory_allocated"]
            return (
                "2 steps through the device phases (policy, reference and critic offloaded / reloaded), critic "
                f"squared error {', '.join(f'{v:.3g}' for v in critic_losses)}; each sync checked exactly and by the "
                "probe: "
                + ", ".join(
                    f"{r.total_s:.2f} s ({r.params_checked} params, probe change diff {r.probe_max_abs_diff:.3g})"
                    for r in reports
                )
            )

        def missed_sync() -> str:
            sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=16, seed=seed + 7)
            rollout = ray.get(engine.generate.remote(prompts, sampling))
            samples = [(c.prompt_token_ids, c.token_ids) for c in rollout]

            def alternating(old):
                return torch.where(torch.arange(len(samples))[:, None] % 2 == 0, 1.0, -1.0).expand_as(old)

            # (1) after a level-2 sleep, generating without a sync is refused (the engine would produce garbage)
            enter(Phase.TRAINING)
            update(samples, alternating)
            try:
                enter(Phase.GENERATION)
                raise AssertionError("GENERATION was entered with weights discarded by the level-2 sleep")
            except RuntimeError as exc:
                refused = str(exc).split(":")[0]
            sync()
            # (2) an update the engine never receives (it stays awake; the states are reloaded by hand)
            before_engine, before_trainer = engine_lps(), trainer_lps()
            policy.call("reload")
            update(samples, alternating)
            policy.call("offload")
            check = DifferentialProbe(tol=0.1, exact=False, prev_engine=[before_engine], prev_trainer=before_trainer)
            after = trainer_lps()
            try:
                check.check([engine_lps()], after)
            except WeightSyncError as exc:
                return f"refused: {refused}; a skipped sync is caught by the probe ({exc})"
            moved = max(abs(a - b) for a, b in zip(after, before_trainer, strict=True))
            raise AssertionError(f"a skipped sync passed the check (the trainer's probe moved by {moved:.3g})")

        def memory() -> str:
            if not on_gpu:
                raise _Skip("no CUDA device")
            free, total = torch.cuda.mem_get_info()
            setup = run_setup(
                total,
                max(micro_batch_tokens, default=0),
                zero_stage=config.zero_stage,
                bf16=config.bf16,
                gradient_checkpointing=config.gradient_checkpointing,
            )
            predicted = predicted_phase_bytes(setup)
            passed, lines = compare_memory([(p, measured[p], predicted[p]) for p in predicted if p in measured])
            lines += [f"{p}: not measured (an earlier check failed)" for p in predicted if p not in measured]
            modelled = colocated_phase_bytes(dataclasses.replace(setup, vllm_enable_sleep=True, critic_dp=1, ref_dp=1))
            phase_rows = [(f"phase {p.value}", used, sum(modelled[p].values())) for p, used in phase_used.items()]
            phases_passed, phase_lines = compare_memory(phase_rows)
            head = (
                f"{baseline / GIB:.2f} GiB in use before the engine, {(total - free) / GIB:.2f} of "
                f"{total / GIB:.1f} GiB after the run; micro-batch {setup.micro_batch_tokens} tokens; "
                f"bound = modelled x {MEMORY_SLACK_RATIO} (CUDA contexts and graph pool modelled); device phases: "
                "device-wide use on entering each phase vs the per-phase model"
            )
            detail = "\n    ".join([head, *lines, *phase_lines])
            if not (passed and phases_passed):
                raise AssertionError(f"measured above the memory model's bound: {detail}")
            return detail

        if _run("agreement", agreement, results) and _run("grpo_steps", grpo_steps, results):
            _run("missed_sync", missed_sync, results)
        _run("memory", memory, results)
    finally:
        for group in (policy, ref, critic):
            if group is not None:
                group.kill()
        ray.get(engine.shutdown.remote(), timeout=120)
        ray.kill(engine)
    return results


def run_sections(on_gpu: bool, lr: float = 1e-5) -> list[CheckResult]:
    """The GPU-only sections (:mod:`reasonrl.distributed.gpu_sections`): a LoRA adapter sync across a level-1
    sleep, a VLM sync with the probe picture, and on 2+ GPUs TP 2 over ``ipc`` and the NCCL broadcast group with a
    2-rank gather; each SKIP with its reason where its GPUs are missing. Run after :func:`run_checks` (whose actors
    are gone by then)."""
    from reasonrl.distributed.gpu_sections import SectionSkipped, sections

    model_path = None
    if on_gpu:
        from reasonrl.models.tiny import tiny_model_path

        model_path = str(tiny_model_path(QWEN2P5_0P5B_SHAPE))
    results: list[CheckResult] = []
    for name, check in sections(on_gpu, model_path, lr=lr):
        try:
            results.append(CheckResult(name, True, check()))
        except SectionSkipped as skip:
            results.append(CheckResult(name, None, str(skip)))
        except Exception as exc:  # a FAIL line with the reason, and the next section still runs
            results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}"))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reasonrl.gpu_check",
        description="GPU smoke test: a vLLM engine and a DeepSpeed policy colocated on one GPU (bf16, Qwen2.5-0.5B "
        "shape, random weights): log-prob agreement, two GRPO steps with verified weight syncs, a missed sync "
        "caught, memory. Exit 0 = all PASS, 1 = a FAIL, 2 = no CUDA GPU (see --cpu).",
    )
    parser.add_argument("--cpu", action="store_true", help="run the same checks on the tiny model on CPU")
    parser.add_argument("--lr", type=float, default=1e-5, help="learning rate of the policy updates (default 1e-5)")
    args = parser.parse_args(argv)
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.cpu:
        print("gpu_check needs a CUDA GPU and none is visible (torch.cuda.is_available() is False).", file=sys.stderr)
        print(
            "Run it on a GPU machine, or pass --cpu to run the same checks on the tiny model on CPU.", file=sys.stderr
        )
        return 2
    results = run_checks(on_gpu=on_gpu and not args.cpu, lr=args.lr)
    results += run_sections(on_gpu=on_gpu and not args.cpu, lr=args.lr)
    for result in results:
        print(result.line())
    failed = [r.name for r in results if r.passed is False]
    print(f"gpu_check: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

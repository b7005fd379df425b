"""GPU smoke test: the first command to run on a machine with one CUDA GPU (``python -m reasonrl.gpu_check``).

It puts one vLLM engine and one DeepSpeed ZeRO-3 policy on the same GPU (engine first, as ``colocate_all`` does),
on a random model with Qwen2.5-0.5B's shape built locally (no download), in bf16, and checks:

1. ``agreement``: bf16 prompt log-probs of a probe, vLLM vs the DeepSpeed policy, on identical weights (kernel
   noise only; reported, and must stay below 1 nat, the sync check's sanity bound);
2. ``grpo_steps``: two GRPO steps of the real components (generate -> group-normalised advantages -> policy update
   -> weight sync verified by the differential probe check of ``reasonrl.distributed.weight_sync``);
3. ``missed_sync``: one more update without a sync must be caught by the differential check;
4. ``memory``: peak device memory of the run against the device's size (the per-phase memory model of
   ``docs/memory.md`` is not compared yet).

Prints PASS / FAIL per check and exits 1 on any failure, 2 when no CUDA GPU is visible (unless ``--cpu``: the same
checks on the tiny model on CPU, which the test suite runs).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from reasonrl.models.tiny import TinyModelSpec

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
    import ray
    import torch

    from reasonrl.distributed.platform import DEVICE_ENV_VAR
    from reasonrl.distributed.ppo_workers import PolicyLossConfig, PolicyWorker, WorkerConfig
    from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
    from reasonrl.distributed.weight_sync import DifferentialProbe, WeightSyncError
    from reasonrl.distributed.worker_group import WorkerGroup
    from reasonrl.experience import Experience
    from reasonrl.models import pad_batch
    from reasonrl.models.tiny import tiny_model_path

    device = "gpu" if on_gpu else "cpu"
    model_path = str(tiny_model_path(QWEN2P5_0P5B_SHAPE if on_gpu else TinyModelSpec()))
    if not ray.is_initialized():
        ray.init(num_cpus=4, num_gpus=1 if on_gpu else 0, include_dashboard=False)
    env = {DEVICE_ENV_VAR: device}
    share = {"num_cpus": 1, "num_gpus": 0.5} if on_gpu else {"num_cpus": 0.5}
    results: list[CheckResult] = []
    (engine,) = create_vllm_engines(
        1, model_path, env=env, dtype="bfloat16", max_model_len=256, gpu_memory_utilization=0.3, **share
    )
    policy = None
    try:
        ray.get(engine.ready.remote(), timeout=600)  # engine first: vLLM needs its memory share free at start-up
        policy = WorkerGroup(PolicyWorker, _Placement(share | {"runtime_env": {"env_vars": env}}), timeout_s=600)
        policy.call("setup", WorkerConfig(model_path=model_path, bf16=True, lr=lr, seed=seed))
        g = torch.Generator().manual_seed(seed)
        probe = torch.randint(3, 2048, (48,), generator=g).tolist()
        prompts = [torch.randint(3, 2048, (8,), generator=g).tolist() for _ in range(4)]
        sync = ("sync_weights", [engine], 64 * 1024**2, probe, 0.1)

        def trainer_lps() -> list[float]:
            return policy.call("compute_logprobs", [(probe[:1], probe[1:])])[0][0][0].tolist()

        def engine_lps() -> list[float]:
            return ray.get(engine.prompt_logprobs.remote(probe))

        def agreement() -> str:
            diff = max(abs(a - b) for a, b in zip(engine_lps(), trainer_lps(), strict=True))
            if not diff < AGREEMENT_BOUND:
                raise AssertionError(f"max |vLLM - DeepSpeed| = {diff:.3g} nats >= {AGREEMENT_BOUND}")
            policy.call(*sync)  # calibrates the differential check on identical weights
            return f"max |vLLM - DeepSpeed| bf16 log-prob on a {len(probe)}-token probe = {diff:.3g} nats"

        def grpo_step(i: int) -> float:
            sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=16, seed=seed + i)
            rollout = ray.get(engine.generate.remote(prompts, sampling))
            samples = [(c.prompt_token_ids, c.token_ids) for c in rollout]
            mask = pad_batch(samples, 0).action_mask
            old = policy.call_sharded("compute_logprobs", [samples])[0][0]
            reward = torch.tensor([float(len(set(c.token_ids))) for c in rollout]).view(len(prompts), -1)
            adv = ((reward - reward.mean(1, keepdim=True)) / (reward.std(1, keepdim=True) + 1e-6)).flatten()
            exp = Experience(samples, mask, old_logprobs=old, advantages=adv[:, None].expand_as(old) * mask)
            policy.call_sharded("update", exp.shard(1), PolicyLossConfig(), *exp.num_tokens_and_seqs())
            return policy.call(*sync)[0].probe_max_abs_diff

        def grpo_steps() -> str:
            diffs = [grpo_step(i) for i in range(2)]
            return "2 steps, each sync verified; max |engine change - trainer change| = " + ", ".join(
                f"{d:.3g}" for d in diffs
            )

        def missed_sync() -> str:
            before_engine, before_trainer = engine_lps(), trainer_lps()
            sampling = SamplingConfig(n=4, temperature=1.0, max_tokens=16, seed=seed + 7)
            rollout = ray.get(engine.generate.remote(prompts, sampling))
            samples = [(c.prompt_token_ids, c.token_ids) for c in rollout]
            mask = pad_batch(samples, 0).action_mask
            old = policy.call_sharded("compute_logprobs", [samples])[0][0]
            adv = torch.where(torch.arange(len(samples))[:, None] % 2 == 0, 1.0, -1.0).expand_as(old) * mask
            exp = Experience(samples, mask, old_logprobs=old, advantages=adv)
            policy.call_sharded("update", exp.shard(1), PolicyLossConfig(), *exp.num_tokens_and_seqs())
            check = DifferentialProbe(tol=0.1, exact=False, prev_engine=[before_engine], prev_trainer=before_trainer)
            after = trainer_lps()
            try:
                check.check([engine_lps()], after)
            except WeightSyncError as exc:
                return f"a skipped sync is caught ({exc})"
            moved = max(abs(a - b) for a, b in zip(after, before_trainer, strict=True))
            raise AssertionError(f"a skipped sync passed the check (the trainer's probe moved by {moved:.3g})")

        def memory() -> str:
            if not on_gpu:
                raise _Skip("no CUDA device")
            free, total = torch.cuda.mem_get_info()
            used = total - free
            if used > 0.95 * total:
                raise AssertionError(f"{used / 2**30:.1f} of {total / 2**30:.1f} GiB in use")
            return f"{used / 2**30:.1f} of {total / 2**30:.1f} GiB in use after the run (per-phase model not compared)"

        if _run("agreement", agreement, results) and _run("grpo_steps", grpo_steps, results):
            _run("missed_sync", missed_sync, results)
        _run("memory", memory, results)
    finally:
        if policy is not None:
            policy.kill()
        ray.get(engine.shutdown.remote(), timeout=120)
        ray.kill(engine)
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
    for result in results:
        print(result.line())
    failed = [r.name for r in results if r.passed is False]
    print(f"gpu_check: {'FAIL (' + ', '.join(failed) + ')' if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""LoRA on the real stack: a 2-rank ZeRO-3 policy with PEFT adapters over gloo. Its reference (the adapter switched
off) is the base model, before and after training; an update trains the adapters only; the merged weight sync
(W + s*B@A per bucket, base names) passes the exact check and the probe, and the engine then scores like the
adapted policy; the HF export is the merged model under the base names, and the adapter saved alone loads with PEFT.

The log-prob comparisons use 1e-4, the weight sync's float32 tolerance: ZeRO-3 ranks, the vLLM engine (its own CPU
kernels, picked from the CPU's flags) and plain transformers are separate implementations of the same float32 model
on other shapes (measured 1e-6 to 5e-5: tests/distributed/test_distributed_ppo_workers.py, test_vision_run.py); a
trained adapter moves these log-probs by more than 1e-3 (asserted), a missing or unmerged one by far more.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import ray
import torch
from engine_weights import load_weights
from fixtures.token_samples import make_samples
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from reasonrl.algos.loss_settings import PolicyLossConfig
from reasonrl.dataplane.experience import Experience
from reasonrl.distributed.adapter_sync import AdapterSyncer
from reasonrl.distributed.ppo_workers import PolicyWorker, WorkerConfig
from reasonrl.distributed.vllm_engine import SamplingConfig, create_vllm_engines
from reasonrl.distributed.weight_sync import WeightSyncer
from reasonrl.distributed.worker_group import WorkerGroup
from reasonrl.models import pad_batch, response_logprobs

pytestmark = pytest.mark.integration
WORLD = 2


def per_rank(group: WorkerGroup, method: str, exp: Experience) -> torch.Tensor:
    """``method`` over each rank's ragged shard, back as ``[batch, T]`` in batch order."""
    shards = exp.shard_indices(WORLD)
    outputs = group.call_sharded(method, [exp.ragged(idx, with_fields=False) for idx in shards])
    grid = torch.zeros(exp.action_mask.shape)
    lengths = [len(r) for _, r in exp.samples]
    for idx, (flat, _) in zip(shards, outputs, strict=True):
        position = 0
        for i in idx:
            grid[i, : lengths[i]] = flat[position : position + lengths[i]]
            position += lengths[i]
    return grid


def plain_logprobs(model, samples) -> torch.Tensor:
    with torch.no_grad():
        return response_logprobs(model, pad_batch(samples, 0))[0]


def test_lora_policy_reference_update_merged_sync_and_export(ray_cluster, vllm_engine, tiny_model_dir, tmp_path):
    config = WorkerConfig(
        model_path=str(tiny_model_dir), lr=5e-3, max_tokens_per_micro_batch=20, lora_rank=8, lora_alpha=16
    )
    policy = WorkerGroup(PolicyWorker, world_size=WORLD, num_cpus_per_actor=0.5, timeout_s=120)
    original = load_file(tiny_model_dir / "model.safetensors")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    samples = make_samples(7)
    mask = pad_batch(samples, 0).action_mask
    exp = Experience(samples, mask)
    expected = plain_logprobs(base, samples)
    lora_engine = None
    try:
        policy.call("setup", config)
        # B = 0: the adapted policy and its reference both start as the base model
        old = per_rank(policy, "ragged_logprobs", exp)
        assert (old - expected).abs()[mask].max() < 1e-4
        assert (per_rank(policy, "ragged_ref_logprobs", exp) - expected).abs()[mask].max() < 1e-4

        exp_update = dataclasses.replace(exp, old_logprobs=old)
        exp_update.advantages = torch.where(torch.arange(len(samples))[:, None] % 2 == 0, 1.0, -1.0) * mask
        tokens, seqs = exp_update.num_tokens_and_seqs()
        for _ in range(2):
            metrics = policy.call_sharded("update", exp_update.shard(WORLD), PolicyLossConfig(), tokens, seqs)
            assert all(m["grad_norm"] > 0 for m in metrics)
        new = per_rank(policy, "ragged_logprobs", exp)
        assert (new - old).abs()[mask].max() > 1e-3  # the adapters trained
        ref = per_rank(policy, "ragged_ref_logprobs", exp)
        assert (ref - expected).abs()[mask].max() < 1e-4  # the base weights did not move: the reference holds

        layout = policy.call("sync_layout")[0]
        assert [name for name, *_ in layout] == [name for name, _ in base.named_parameters()]  # base names
        syncer = WeightSyncer(
            policy,
            [vllm_engine],
            bucket_bytes=256 * 1024,
            tol=1e-4,
            exact=True,
            transport="broadcast",
            verify_with="sent_weights",
        )
        probe = samples[0][0] + samples[0][1]
        report = syncer.run(probe)  # raises unless every engine tensor equals what rank 0 sent, and the probe agrees
        print(f"LoRA merged sync: {report}")
        assert report.num_tensors == len(original) and report.probe_max_abs_diff < 1e-4
        engine_probe = torch.tensor(ray.get(vllm_engine.prompt_logprobs.remote(probe)))
        trainer_probe = plain_logprobs(base, [(probe[:1], probe[1:])])[0]
        assert (engine_probe - trainer_probe).abs().max() > 1e-3  # the engine left the base model ...
        policy_probe = per_rank(
            policy,
            "ragged_logprobs",
            Experience([(probe[:1], probe[1:])], torch.ones(1, len(probe) - 1, dtype=torch.bool)),
        )
        assert (engine_probe - policy_probe[0]).abs().max() < 1e-4  # ... for the adapted policy

        # the HF export is the merged model: a plain folder that transformers loads, scoring like the policy
        (written,) = [p for p in policy.call("export_hf", str(tmp_path / "policy_hf")) if p is not None]
        exported = AutoModelForCausalLM.from_pretrained(written, dtype=torch.float32).eval()
        assert sorted(exported.state_dict()) == sorted(base.state_dict())
        assert (plain_logprobs(exported, samples) - new).abs()[mask].max() < 1e-4
        # the adapter alone, as PEFT saves it: the base model plus it scores like the policy
        (folder,) = [p for p in policy.call("export_adapter", str(tmp_path / "adapter")) if p is not None]
        adapted = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32), folder
        ).eval()
        assert (plain_logprobs(adapted, samples) - new).abs()[mask].max() < 1e-4
        adapter_bytes = sum(f.stat().st_size for f in Path(folder).iterdir())
        assert adapter_bytes < sum(t.numel() * t.element_size() for t in original.values()) / 5

        # adapter-only sync into an engine serving the base model with vLLM's LoRA support: the same probe as the
        # merged sync, for a fraction of the bytes
        (lora_engine,) = create_vllm_engines(
            1, str(tiny_model_dir), num_cpus=0.5, dtype="float32", max_model_len=1024, lora_rank=8, lora_versions=2
        )
        adapter_syncer = AdapterSyncer(policy, [lora_engine], tol=1e-4, exact=True)
        adapter_report = adapter_syncer.run(probe)
        print(f"LoRA adapter sync: {adapter_report}")
        adapter_probe = torch.tensor(ray.get(lora_engine.prompt_logprobs.remote(probe)))
        assert (adapter_probe - engine_probe).abs().max() < 1e-4  # both modes serve the same policy
        assert adapter_report.num_bytes < report.num_bytes / 3 and adapter_report.probe_max_abs_diff < 1e-4

        # generation goes through the adapter too: the sampled tokens' log-probs are the policy's
        sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=8, seed=5, logprobs=True)
        rollout = ray.get(lora_engine.generate.remote([s[0] for s in samples[:3]], sampling))
        sampled = [(c.prompt_token_ids, c.token_ids) for c in rollout]
        sampled_mask = pad_batch(sampled, 0).action_mask
        engine_lp = torch.zeros(sampled_mask.shape)
        for i, c in enumerate(rollout):
            engine_lp[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
        policy_lp = per_rank(policy, "ragged_logprobs", Experience(sampled, sampled_mask))
        assert (engine_lp - policy_lp).abs()[sampled_mask].max() < 1e-4

        # two more updates, two more syncs: each reaches the engine, which keeps the last lora_versions adapters
        for _ in range(2):
            policy.call_sharded("update", exp_update.shard(WORLD), PolicyLossConfig(), tokens, seqs)
            adapter_syncer.run(probe)
        assert adapter_syncer.registered == [[2, 3]]  # versions 2 and 3 registered, version 1 removed
        moved = torch.tensor(ray.get(lora_engine.prompt_logprobs.remote(probe)))
        assert (moved - adapter_probe).abs().max() > 1e-3
    finally:
        load_weights(vllm_engine, original.items())  # the engine is shared: restore it
        policy.kill()
        if lora_engine is not None:
            ray.get(lora_engine.shutdown.remote(), timeout=120)
            ray.kill(lora_engine)

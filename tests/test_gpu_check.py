"""``python -m reasonrl.gpu_check``: the GPU smoke command. Its --cpu path runs here (tiny model, bf16, real stack)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from reasonrl import gpu_check


def test_help_names_the_checks():
    out = subprocess.run([sys.executable, "-m", "reasonrl.gpu_check", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "--cpu" in out.stdout and "GRPO" in out.stdout


def test_without_a_gpu_it_says_so_and_exits_2(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


def test_failures_exit_1_and_are_listed(monkeypatch, capsys):
    results = [gpu_check.CheckResult("agreement", True, "ok"), gpu_check.CheckResult("missed_sync", False, "passed")]
    monkeypatch.setattr(gpu_check, "run_checks", lambda **kwargs: results)
    assert gpu_check.main(["--cpu"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] missed_sync" in out and "gpu_check: FAIL (missed_sync)" in out


def test_the_gpu_model_has_qwen2p5_0p5b_shape():
    spec = gpu_check.QWEN2P5_0P5B_SHAPE
    params = spec.vocab_size * spec.hidden_size + spec.num_hidden_layers * (
        spec.hidden_size * spec.hidden_size * 2  # q and o
        + 2 * spec.hidden_size * (spec.hidden_size // spec.num_attention_heads * spec.num_key_value_heads)  # k, v
        + 3 * spec.hidden_size * spec.intermediate_size  # gate, up, down
    )
    assert 0.48e9 < params < 0.5e9  # Qwen2.5-0.5B: 494M parameters (tied embeddings)


@pytest.mark.integration
def test_cpu_path_passes_every_check(ray_cluster, capsys):
    results = gpu_check.run_checks(on_gpu=False)
    for result in results:
        print(result.line())
    assert [r.name for r in results] == ["agreement", "grpo_steps", "missed_sync", "memory"]
    assert all(r.passed for r in results[:3]), [r.line() for r in results]
    assert results[3].passed is None  # no CUDA device

"""The GPU-only sections of ``python -m reasonrl.gpu_check`` (issue 39 item 8: LoRA across a level-1 sleep, a VLM
sync with the probe picture, TP 2 over ipc, the NCCL broadcast group with a 2-rank gather). On CPU every one reports
SKIP with its reason, without starting Ray or building a model; on a GPU host (``gpu`` marker) they run, each PASS
or SKIP (the 2-GPU ones on a 1-GPU host)."""

from __future__ import annotations

import pytest

from reasonrl import gpu_check
from reasonrl.distributed import gpu_sections


def test_skip_reasons_name_what_is_missing():
    assert gpu_sections.skip_reason(1, on_gpu=False, visible=0) == "GPU-only (no CUDA device, or --cpu)"
    assert gpu_sections.skip_reason(2, on_gpu=True, visible=1) == "needs 2 GPUs, 1 visible"
    assert gpu_sections.skip_reason(2, on_gpu=True, visible=2) is None
    assert gpu_sections.skip_reason(1, on_gpu=True, visible=1) is None


def test_the_sections_are_the_lora_vision_tp2_and_broadcast_checks():
    assert gpu_sections.SECTIONS == (
        ("lora_adapter_sleep", 1),
        ("vision_sync", 1),
        ("tp2_ipc", 2),
        ("broadcast_gather", 2),
    )


def test_on_cpu_every_section_says_skip_and_why_without_starting_ray(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("a skipped section started Ray"))
    results = gpu_check.run_sections(on_gpu=False)
    assert [r.name for r in results] == [name for name, _ in gpu_sections.SECTIONS]
    assert all(r.passed is None and "GPU-only" in r.detail for r in results), [r.line() for r in results]
    assert results[2].line() == "[SKIP] tp2_ipc: GPU-only (no CUDA device, or --cpu)"


def test_a_one_gpu_host_skips_the_two_gpu_sections_saying_so(monkeypatch):
    monkeypatch.setattr(gpu_sections, "visible_gpus", lambda: 1)
    checks = dict(gpu_sections.sections(on_gpu=True, model_path="unused"))
    for name in ("tp2_ipc", "broadcast_gather"):
        with pytest.raises(gpu_sections.SectionSkipped, match="needs 2 GPUs, 1 visible"):
            checks[name]()


def test_a_failing_section_is_a_fail_line_and_the_next_still_runs(monkeypatch):
    def boom():
        raise AssertionError("probe did not move")

    monkeypatch.setattr(gpu_sections, "sections", lambda *a, **k: [("a", boom), ("b", lambda: "fine")])
    a, b = gpu_check.run_sections(on_gpu=False)
    assert a.line() == "[FAIL] a: AssertionError: probe did not move" and b.passed


@pytest.mark.gpu
def test_the_sections_pass_or_skip_on_a_gpu_host():
    results = gpu_check.run_sections(on_gpu=True)
    assert all(r.passed is not False for r in results), [r.line() for r in results]
    assert results[0].passed and results[1].passed  # lora_adapter_sleep and vision_sync need one GPU

"""The optimizer when DeepSpeed's FusedAdam cannot be built (issue 39, item 7): ``"auto"`` on a GPU falls back to
``torch.optim.AdamW(fused=True)`` with one warning instead of DeepSpeed's ``CUDAMismatchException`` /
``MissingCUDAException`` at start-up. The decision is pure (:func:`optim_setup.fused_or_fallback`); the probe
(:func:`deepspeed_engine.fused_adam_build_problem`) asks DeepSpeed's op builder, whose CUDA-version reading is faked
here (this machine has no nvcc)."""

from __future__ import annotations

import pytest
import torch
from loguru import logger

from reasonrl.distributed import deepspeed_engine as ds
from reasonrl.distributed import optim_setup


def test_fused_adam_is_kept_when_it_can_be_built():
    assert optim_setup.fused_or_fallback(None) == ("fused", None)


def test_without_a_matching_nvcc_the_fallback_is_torch_fused_with_one_warning_naming_the_cause_and_fix():
    impl, warning = optim_setup.fused_or_fallback("Installed CUDA version 12.4 does not match ... 13.0")
    assert impl == optim_setup.TORCH_FUSED
    assert "12.4" in warning and "torch.optim.AdamW(fused=True)" in warning
    assert "DS_BUILD_FUSED_ADAM=1" in warning and "offload_states" in warning


@pytest.fixture
def no_prebuilt_fused_adam(monkeypatch):
    """FusedAdam neither pre-built nor loaded in this process, whatever the install holds."""
    import deepspeed.git_version_info as info
    from deepspeed.ops.op_builder.builder import OpBuilder

    monkeypatch.setattr(info, "installed_ops", {})
    monkeypatch.setattr(OpBuilder, "_loaded_ops", {})
    monkeypatch.delenv("DS_SKIP_CUDA_CHECK", raising=False)


def test_the_probe_reports_an_nvcc_whose_cuda_differs_from_torchs(monkeypatch, no_prebuilt_fused_adam):
    from deepspeed.ops.op_builder import builder

    monkeypatch.setattr(builder, "installed_cuda_version", lambda name="": (12, 4))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    problem = ds.fused_adam_build_problem()
    assert problem and "12.4" in problem and "13.0" in problem, problem


def test_the_probe_reports_a_missing_toolkit(monkeypatch, no_prebuilt_fused_adam):
    from deepspeed.ops.op_builder import builder

    def missing(name=""):
        raise builder.MissingCUDAException("CUDA_HOME does not exist, unable to compile CUDA op(s)")

    monkeypatch.setattr(builder, "installed_cuda_version", missing)
    assert "CUDA_HOME does not exist" in ds.fused_adam_build_problem()


def test_a_prebuilt_fused_adam_needs_no_toolkit(monkeypatch, no_prebuilt_fused_adam):
    import deepspeed.git_version_info as info
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder import builder

    monkeypatch.setattr(info, "installed_ops", {"fused_adam": True})
    monkeypatch.setattr(info, "accelerator_name", get_accelerator()._name)
    monkeypatch.setattr(builder, "installed_cuda_version", lambda name="": pytest.fail("the toolkit was asked"))
    assert ds.fused_adam_build_problem() is None


def _captured_warnings():
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING")
    return lines, sink


def test_auto_on_a_gpu_without_nvcc_builds_torch_fused_adamw_and_warns_once(monkeypatch):
    """``make_optimizer`` (what every policy / critic worker calls with ``impl="auto"``): the fallback is built, and
    a second optimizer in the same process (critic beside policy) does not repeat the warning. Runs on CPU: torch's
    fused AdamW has a CPU kernel."""
    monkeypatch.setattr(optim_setup, "device_type", lambda: "cuda")
    monkeypatch.setattr(ds, "fused_adam_build_problem", lambda: "CUDA_HOME does not exist")
    monkeypatch.setattr(ds, "_WARNED", set())
    lines, sink = _captured_warnings()
    try:
        first = ds.make_optimizer(torch.nn.Linear(4, 4), lr=1e-3, weight_decay=0.1)
        second = ds.make_optimizer(torch.nn.Linear(4, 4), lr=1e-3)
    finally:
        logger.remove(sink)
    for opt in (first, second):
        assert type(opt) is torch.optim.AdamW and opt.defaults["fused"] is True
    assert len([line for line in lines if "FusedAdam cannot be built" in line]) == 1, lines


def test_an_explicit_fused_request_is_not_rewritten(monkeypatch):
    """Only ``"auto"`` falls back; ``impl="fused"`` reaches DeepSpeed's FusedAdam unprobed (faked here: building the
    real one on CPU is a ~2 min JIT build)."""
    import deepspeed.ops.adam

    class FakeFusedAdam:
        def __init__(self, groups, **kwargs):
            self.kwargs = kwargs

    monkeypatch.setattr(deepspeed.ops.adam, "FusedAdam", FakeFusedAdam)
    monkeypatch.setattr(ds, "fused_adam_build_problem", lambda: pytest.fail("probed for an explicit impl"))
    opt = ds.make_optimizer(torch.nn.Linear(4, 4), lr=1e-3, impl="fused")
    assert type(opt) is FakeFusedAdam and opt.kwargs["adam_w_mode"] is True

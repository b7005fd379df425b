"""``reasonrl.run.launch.start_roles``: the order of start-up calls (issue 39, item 6).

Under ``colocate_all`` on GPUs, DeepSpeed's process groups (``WorkerGroup(...)`` blocks in ``init_process_group``, which
NCCL with ``device_id`` sets up eagerly, allocating device memory: ``deepspeed/comm/torch.py`` ~276-282) must start only
after every engine has reported ready and gone to sleep, so vLLM's memory profiling never sees them
(``v1/worker/gpu_worker.py`` ~716-728). Fakes of the engine and worker-group handles record every call in order; nothing
here starts Ray.
"""

from __future__ import annotations

import contextlib

import pytest
import ray

from playground.tiny_grpo_cpu import TinyGRPOCPUConfig


class _Plan(dict):
    device = "gpu"


def _record_start_up(monkeypatch, *, colocate_all: bool, device: str) -> list[str]:
    """Run ``start_roles`` on fakes; return the calls in the order they were made (``get:<refs>`` where the driver
    waited)."""
    from reasonrl.distributed import vllm_engine, worker_group
    from reasonrl.run.launch import start_roles

    events: list[str] = []

    class Call:
        def __init__(self, name):
            self.name = name

        def remote(self, *args):
            events.append(self.name)
            return self.name

    class Engine:
        ready, sleep = Call("engine.ready"), Call("engine.sleep")

    class Group:
        def __init__(self, cls, placement, name):
            self.name = name
            events.append(f"{name}.init_process_group")  # WorkerGroup.__init__ joins the process group

        def call_async(self, method, *args):
            events.append(f"{self.name}.{method}")
            return [f"{self.name}.{method}"]

        def kill(self):
            pass

    report = dict(requested="auto", attn_implementation="sdpa", packing=False, device=device, flash_attn_error=None)
    monkeypatch.setattr(worker_group, "WorkerGroup", Group)
    monkeypatch.setattr(vllm_engine, "create_vllm_engines", lambda *a, **k: events.append("engines") or [Engine()])
    monkeypatch.setattr(ray, "get", lambda refs: events.append("get:" + ",".join(refs)) or [report] * len(refs))
    cfg = TinyGRPOCPUConfig(colocate_all=colocate_all)
    plan = _Plan(policy=None, ref=None, vllm=None)
    plan.device = device
    with contextlib.ExitStack() as stack:
        start_roles(cfg, stack, plan, num_steps=1, pad_token_id=0)
        stack.pop_all()
    return events


def test_colocated_gpu_engines_are_ready_and_asleep_before_any_process_group_starts(monkeypatch):
    events = _record_start_up(monkeypatch, colocate_all=True, device="gpu")
    first_group = min(events.index("policy.init_process_group"), events.index("ref.init_process_group"))
    before = events[:first_group]
    # ready awaited, then sleep sent and awaited: all before the first init_process_group
    assert "get:engine.ready" in before, events
    assert "get:engine.sleep" in before, events
    assert before.index("get:engine.ready") < before.index("engine.sleep") < before.index("get:engine.sleep")
    # and no DeepSpeed setup before the groups
    assert not [e for e in before if e.endswith(".setup")], events
    assert events.index("get:engine.sleep") < events.index("policy.setup")


@pytest.mark.parametrize(("colocate_all", "device"), [(False, "gpu"), (True, "cpu"), (False, "cpu")])
def test_otherwise_engine_start_up_overlaps_the_rendezvous(monkeypatch, colocate_all, device):
    """Split placement, or CPU (no vLLM memory check; sleep is simulated): the engines are created first and their
    readiness is awaited together with the setups, so their start-up overlaps the groups' rendezvous."""
    events = _record_start_up(monkeypatch, colocate_all=colocate_all, device=device)
    assert events.index("engines") < events.index("policy.init_process_group")
    waits = [e for e in events if e.startswith("get:")]
    assert waits[0] == "get:engine.ready,policy.setup,ref.setup", events
    assert ("engine.sleep" in events) == colocate_all

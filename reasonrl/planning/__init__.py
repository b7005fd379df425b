"""Pure planners: what a run needs before anything starts, computed from plain values (standard library only).

* ``placement_layout`` (+ ``feasibility``): role sizes -> placement group requests, checked against a cluster's nodes;
  :mod:`reasonrl.distributed.placement` creates the groups on Ray.
* ``memory_model``: the bytes each device holds in each phase of a step, from the model's shape and the settings.
* ``device_phases``: the phases of a colocated step and what each keeps resident on a shared device (the table the
  memory model reads and :class:`reasonrl.distributed.phases.PhaseMachine` implements).

``config/`` (validation refuses a plan no cluster can hold or no GPU can fit) and ``distributed/`` both import this
package; it imports no Ray, torch, vLLM or DeepSpeed and no other reasonrl package (``tests/test_layout.py``).
"""

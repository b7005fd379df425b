"""The logical CPUs of a local Ray instance: one rule for ``init_ray`` (which starts the instance with them) and for
config validation (which checks that the run's bundles fit in them), below both. Standard library only."""

from __future__ import annotations

import os

# Logical CPUs Ray advertises on a CPU-only machine (roles x bundles need more slots than physical cores).
CPU_OVERSUBSCRIBE_MIN = 8


def local_ray_cpus(on_gpu: bool) -> int | None:
    """``num_cpus`` of a local Ray instance: on a GPU machine None (Ray counts the cores itself); on CPU the
    machine's cores but at least :data:`CPU_OVERSUBSCRIBE_MIN` (the actors mostly wait on each other, so
    time-sharing the cores is fine)."""
    return None if on_gpu else max(CPU_OVERSUBSCRIBE_MIN, os.cpu_count() or 1)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS reports one, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1

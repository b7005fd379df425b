"""Starting (or joining) the Ray cluster reasonrl runs on.

On a CPU machine Ray's logical CPU count is oversubscribed: each role is a Ray actor holding one CPU bundle, and
a 2-core box must still host 2 DeepSpeed ranks plus a vLLM engine plus the driver (those actors mostly wait on
each other, so time-sharing the cores is fine). On GPU clusters the real resources are used as reported.
"""

from __future__ import annotations

import os

from loguru import logger

from reasonrl.distributed.platform import runtime_env_vars

# Logical CPUs Ray advertises on a CPU-only machine (roles x bundles need more slots than physical cores).
CPU_OVERSUBSCRIBE_MIN = 8


def init_ray(
    address: str | None = None, num_cpus: int | None = None, object_store_memory: int | None = None, **ray_kwargs
):
    """Connect to ``address`` (e.g. ``"auto"`` after ``ray start --head``) or start a local Ray instance.

    Every worker process inherits :func:`reasonrl.distributed.platform.runtime_env_vars`. Returns the cluster's
    resources. Calling it twice is harmless (the second call returns the running cluster's resources).
    ``ray_kwargs`` go to ``ray.init`` as they are (e.g. ``_temp_dir``).
    """
    import ray

    if ray.is_initialized():
        return ray.cluster_resources()
    env_vars = runtime_env_vars()
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs = dict(runtime_env={"env_vars": env_vars}, include_dashboard=False, log_to_driver=True) | ray_kwargs
    if address:
        ray.init(address=address, **kwargs)
    else:
        import torch

        if num_cpus is None and not torch.cuda.is_available():
            num_cpus = max(CPU_OVERSUBSCRIBE_MIN, os.cpu_count() or 1)
        ray.init(num_cpus=num_cpus, object_store_memory=object_store_memory, **kwargs)
    resources = ray.cluster_resources()
    logger.info(f"Ray cluster resources: { {k: v for k, v in resources.items() if not k.startswith('node:')} }")
    return resources


def shutdown_ray() -> None:
    """Stop the local Ray instance (or disconnect from a remote one)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()

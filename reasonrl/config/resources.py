"""The resource rules of a config (part of :func:`reasonrl.config.validate.validate_config`): the colocation rules
of the placement plan, and whether the devices it asks for exist: on the Ray cluster when its resources are
given (after ``ray.init``), else on this machine when the run will start a local Ray instance (before it starts:
its GPUs, and the logical CPUs ``init_ray`` gives it). Never imports Ray, DeepSpeed or vLLM."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reasonrl.config.names import DEVICES
from reasonrl.config.probes import _gpu_count
from reasonrl.utils.cpus import CPU_OVERSUBSCRIBE_MIN, local_ray_cpus

if TYPE_CHECKING:
    from reasonrl.config.base import BasePPOExpConfig


def starts_local_ray(address: str | None) -> bool:
    """Whether ``init_ray(address)`` starts a new local Ray instance (no address and no ``RAY_ADDRESS``)."""
    return not address and not os.environ.get("RAY_ADDRESS", "").strip()


def local_num_cpus(device: str | None) -> int | None:
    """``num_cpus`` of the local Ray instance ``init_ray`` starts for a run on ``device``: on CPU (``"cpu"``, or
    ``"auto"``/None on a machine without a GPU) the machine's cores but at least :data:`CPU_OVERSUBSCRIBE_MIN`;
    on GPU None (Ray counts the cores itself). The rule is :func:`reasonrl.utils.cpus.local_ray_cpus`, the one
    ``init_ray`` starts the instance with."""
    return local_ray_cpus(device == "gpu" or (device != "cpu" and _gpu_count() > 0))


def check_resources(
    cfg: BasePPOExpConfig,
    cluster_resources: Mapping[str, float] | None,
    nodes: Sequence[Any] | None,
    structural_ok: bool,
) -> list[str]:
    """Problems of the resource request of ``cfg``: the colocation rules always; with ``cluster_resources`` /
    ``nodes`` (``ray.cluster_resources()`` / ``ray.nodes()``) whether that cluster can hold it; without them and
    without ``ray_address`` / ``RAY_ADDRESS`` (``structural_ok``: no other problem) whether the local Ray instance
    the run starts on this machine can."""
    from reasonrl.planning.placement_layout import PlacementError, check_feasible, plan_groups

    if cfg.device not in DEVICES:
        return []  # reported by _check_names
    given_cluster = cluster_resources is not None or bool(nodes)
    if cfg.device != "auto":
        device = cfg.device
    elif given_cluster:
        has_gpu = (cluster_resources or {}).get("GPU", 0) > 0 or any(
            (n.get("Resources") or {}).get("GPU", 0) > 0 for n in nodes or ()
        )
        device = "gpu" if has_gpu else "cpu"
    else:
        device = "gpu"  # the bundle shape does not change the colocation rules; devices are counted below
    try:
        requests = plan_groups(cfg.role_resources(), device=device, **cfg.placement_kwargs())
    except PlacementError as exc:
        return [f"resources/colocation: {exc} [config: {sizes_text(cfg)}]"]
    if given_cluster:
        try:
            check_feasible(requests, cluster_resources, nodes)
        except PlacementError as exc:
            return [f"resources: {exc}\n    [config: {sizes_text(cfg)}]"]
        return []
    if not structural_ok or not starts_local_ray(cfg.ray_address):
        return []
    return _local_problems(cfg, requests)


def _local_problems(cfg: BasePPOExpConfig, requests: list) -> list[str]:
    """The local Ray instance ``init_ray`` will start on this machine: enough GPUs (``torch.cuda.device_count()``,
    or 0 at once on a machine without a GPU driver) and logical CPUs (:func:`local_num_cpus`) for ``requests``."""
    from reasonrl.planning.placement_layout import PlacementError, check_feasible, plan_groups

    count = 0 if cfg.device == "cpu" else _gpu_count()
    device = "cpu" if cfg.device == "cpu" or (cfg.device == "auto" and count == 0) else "gpu"
    if device == "cpu" and cfg.device == "auto":
        requests = plan_groups(cfg.role_resources(), device="cpu", **cfg.placement_kwargs())
    needed = sum(req.num_bundles for req in requests)
    if device == "gpu" and count < needed:
        layout = "; ".join(req.describe() for req in requests)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return [
            f"device={cfg.device!r}: the run needs {needed} GPUs ({layout}) but this machine has {count} visible"
            + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
            + ": lower the *_num_nodes / *_devices_per_node and vllm_num_engines fields (or colocate roles), run "
            "with DEBUG_MODE=1 for a one-device run, set ray_address to join a larger Ray cluster"
            + (", or use device=cpu" if count == 0 else "")
            + f" [config: {sizes_text(cfg)}]"
        ]
    cores = os.cpu_count() or 1
    cpus = local_num_cpus(device) or cores  # on GPU Ray counts the cores itself (at most these)
    try:
        check_feasible(requests, {"CPU": float(cpus), "GPU": float(count)}, None)
    except PlacementError as exc:
        why = f"max({CPU_OVERSUBSCRIBE_MIN}, {cores} cores)" if device == "cpu" else f"{cores} cores"
        return [
            f"resources: the local Ray instance this run starts (ray_address=none) has {cpus} logical CPUs ({why}) "
            f"and {count} GPUs: {exc}\n    [config: {sizes_text(cfg)}, cpus_per_bundle={cfg.cpus_per_bundle:g}; "
            "or set ray_address to join a larger Ray cluster]"
        ]
    return []


def sizes_text(cfg: BasePPOExpConfig) -> str:
    """The resource fields of the enabled roles, as the user writes them."""
    res = cfg.role_resources()
    parts = [
        f"{role}_num_nodes={r.num_nodes} {role}_devices_per_node={r.devices_per_node}"
        for role, r in res.items()
        if role not in ("vllm", "teacher") and r.enabled
    ]
    if res["teacher"].enabled:  # sized by the reference's fields
        parts.append(f"teacher as ref_num_nodes={cfg.ref_num_nodes} ref_devices_per_node={cfg.ref_devices_per_node}")
    parts.append(f"vllm_num_engines={cfg.vllm_num_engines} vllm_tensor_parallel_size={cfg.vllm_tensor_parallel_size}")
    flags = [name for name in ("colocate_all", "colocate_policy_ref", "colocate_critic_reward") if getattr(cfg, name)]
    return ", ".join(parts) + (f", {'+'.join(flags)}=true" if flags else ", no colocation")

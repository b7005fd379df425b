"""Where the frozen reference model runs: ``reference_process`` (``auto``, ``own`` or ``policy``).

``own``: the reference is a role of its own (``ReferenceWorker`` ranks, one process each). ``policy``: each policy
rank loads a frozen copy of ``pretrain`` next to the model it trains and computes the reference's log-probs itself,
as a LoRA policy already does with its adapter switched off; no reference role is placed. The numbers are the same
(the same weights, the same forward code on the same placement); what goes is one process per rank: its Python
imports (torch, transformers, DeepSpeed: ~4-5 CPU-s), its Ray worker and its process group. ``auto`` (the default)
is ``policy`` where that changes nothing else, and ``own`` otherwise.

``policy`` needs (:func:`fusion_blocker` names the first that fails):

* a CPU run (``device=cpu``): on a GPU the phase machine moves each role's states on and off the device on its
  own, and that path is not built for a reference inside the policy's process;
* the reference sized as the policy (``ref_num_nodes`` / ``ref_devices_per_node``) and placed with it
  (``colocate_all`` or ``colocate_policy_ref``): the policy's ranks run it on the policy's shards;
* ``sequence_parallel_size=1`` (the policy's SP group would have to switch a second model's attention);
* the same ZeRO stage for both roles (``zero_stage=auto`` resolves them apart only for ``ref_offload_params`` on one
  rank): one process then never holds models of two stages.

Pure and stdlib only, like the rest of ``reasonrl.config``.
"""

from __future__ import annotations

from typing import Any

from reasonrl.config.zero_stages import role_zero_stage

REFERENCE_PROCESSES = ("auto", "own", "policy")
"""What the ``reference_process`` field accepts."""


def fusion_blocker(cfg: Any) -> str | None:
    """Why the reference of ``cfg`` cannot run inside the policy's processes (a short reason), or None."""
    if cfg.device != "cpu":
        return f"a CPU run (device=cpu; this config has device={cfg.device!r})"
    sizes = (cfg.ref_num_nodes, cfg.ref_devices_per_node)
    if sizes != (cfg.policy_num_nodes, cfg.policy_devices_per_node):
        return (
            f"the reference sized as the policy (ref_num_nodes={sizes[0]}, ref_devices_per_node={sizes[1]}; "
            f"policy {cfg.policy_num_nodes} x {cfg.policy_devices_per_node})"
        )
    if not (cfg.colocate_all or cfg.colocate_policy_ref):
        return "the reference placed with the policy (colocate_all or colocate_policy_ref)"
    if cfg.sequence_parallel_size != 1:
        return f"sequence_parallel_size=1 (this config has {cfg.sequence_parallel_size})"
    stages = role_zero_stage(cfg, "policy"), role_zero_stage(cfg, "ref")
    if stages[0] != stages[1]:
        return f"the same ZeRO stage for both roles (policy ZeRO-{stages[0]}, ref ZeRO-{stages[1]})"
    return None


def reference_fused(cfg: Any) -> bool:
    """True iff a run of ``cfg`` computes a full reference model's log-probs inside the policy's processes: a
    reference is needed (``kl_mode``), the policy trains every weight (LoRA has its own way: the adapter switched
    off), and ``reference_process`` is ``policy``, or ``auto`` with no :func:`fusion_blocker`."""
    if cfg.kl_mode == "none" or cfg.lora_rank > 0:
        return False
    choice = getattr(cfg, "reference_process", "own")  # a checkpoint's config saved before the field: its own role
    return choice == "policy" or (choice == "auto" and fusion_blocker(cfg) is None)


def reference_process_problems(cfg: Any) -> list[str]:
    """The problem of an explicit ``reference_process=policy`` that this config cannot run (empty when fine)."""
    if cfg.reference_process != "policy" or not reference_fused(cfg):
        return []
    why = fusion_blocker(cfg)
    if why is None:
        return []
    return [f"reference_process='policy' needs {why}: set reference_process=auto (or own) to give it its own ranks"]

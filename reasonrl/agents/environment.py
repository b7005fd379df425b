"""The environment interface of multi-turn rollouts: one instance per sample, stepped once per model turn.

    class MyEnv:                                   # env_fn=path/to/my_env.py:MyEnv (a class or a factory)
        def reset(self, row: dict) -> str | None:  # None: the prompt is the data template's rendering of the row
            ...
        def step(self, model_turn: str) -> StepResult:
            return StepResult(observation="...", reward=0.0, done=False)

The rollout loop (:mod:`reasonrl.loop.multi_turn`) creates one environment per sample with no arguments, calls
``reset(row)`` once, then after every model turn that ended normally ``step(text of that turn)``: an episode ends
when ``step`` says ``done``, when the model's turn hit the token budget, or at the turn cap. The observation of a
step that is not done is appended to the conversation as a tool message (the chat template's tokens for it) and is
not trained on; ``reward`` of every step is added to the outcome reward of the sample.

Environments run in worker threads of the driver, one step of one sample at a time; a step that raises, returns
something that is not a :class:`StepResult` or passes the per-step deadline ends that sample with a counted error
and the run goes on.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass
class StepResult:
    """What one environment step returns.

    Attributes:
        observation: the text of the next tool message (ignored when ``done``); None with ``done=False`` is an
            error of the environment.
        reward: a per-turn reward, added to the sample's outcome reward (0 for most tool environments).
        done: the episode ends here (the model's last turn is its answer).
        info: counters the loop sums into the step's metrics: ``{"tool_calls": {name: n}, "tool_errors":
            {name: n}}`` (other keys are kept in the generation dump only).
    """

    observation: str | None = None
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@runtime_checkable
class Environment(Protocol):
    """What ``env_fn`` must build: an object with ``reset(row)`` and ``step(model_turn)`` (``close()`` optional)."""

    def reset(self, row: dict) -> str | None: ...

    def step(self, model_turn: str) -> StepResult: ...

"""One sample of a multi-turn rollout, token by token: the conversation so far, its loss mask and its budget.

    episode = Episode(prompt_ids, budget=generate_max_len, max_turns=4, max_observation_tokens=256)
    request_ids, max_tokens = episode.next_turn()        # the whole conversation so far, tokens left
    episode.add_model_turn(ids, logprobs, text, finish_reason)
    episode.add_observation(obs_ids, obs_text)           # False: it did not fit, the episode ended
    completion = episode.to_completion(prompt_index, sample_index)

The response is every token after the prompt: model turns (``mask`` True, the engine's log-probs) and observations
(``mask`` False, log-prob 0). Invariants: ``len(response) == len(mask) == len(logprobs) <= budget``; model tokens are
the engine's ids verbatim; the turn count never passes ``max_turns``.

Observation rules:

* longer than ``max_observation_tokens``: cut in the middle (the first and last halves kept, a marker between), at
  the text level before tokenizing, so the tokens stay the chat template's;
* would leave no room for another model turn (``budget - len(response) - len(observation) < min_turn_tokens``):
  not appended; the episode ends as ``"length"`` with the model's last turn as its end (no dangling observation).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from reasonrl.dataplane.completion import Completion

CUT_MARKER = "\n...[{} characters cut]...\n"


def cut_middle(text: str, max_chars: int) -> tuple[str, bool]:
    """``text`` with its middle replaced by a marker so that it keeps at most about ``max_chars`` characters of the
    original (first and last halves); ``(text, cut?)``."""
    if len(text) <= max_chars:
        return text, False
    head = max_chars // 2
    tail = max_chars - head
    return text[:head] + CUT_MARKER.format(len(text) - max_chars) + text[len(text) - tail :], True


@dataclasses.dataclass
class Episode:
    """The state of one multi-turn sample (see the module docstring)."""

    prompt_ids: list[int]
    budget: int
    max_turns: int
    min_turn_tokens: int = 1
    response: list[int] = dataclasses.field(default_factory=list)
    mask: list[bool] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    turns: list[dict] = dataclasses.field(default_factory=list)
    env_reward: float = 0.0
    finish_reason: str = ""
    done: bool = False
    error: str | None = None
    observation_cuts: int = 0
    budget_truncated: bool = False

    @property
    def model_turns(self) -> int:
        return sum(1 for t in self.turns if t["role"] == "assistant")

    def next_turn(self) -> tuple[list[int], int]:
        """(the ids the next model turn continues: prompt + response so far, its ``max_tokens``)."""
        if self.done:
            raise RuntimeError("next_turn on a finished episode")
        return self.prompt_ids + self.response, self.budget - len(self.response)

    def add_model_turn(self, ids: Sequence[int], logprobs: Sequence[float] | None, text: str, finish_reason: str):
        """Append a model turn (ids verbatim). A turn that hit its ``max_tokens`` ends the episode (``"length"``);
        so does the last turn allowed."""
        left = self.budget - len(self.response)
        if len(ids) > left:
            raise ValueError(f"a model turn of {len(ids)} tokens overflows the budget ({left} left)")
        self.response += list(ids)
        self.mask += [True] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)
        self.turns.append({"role": "assistant", "text": text, "num_tokens": len(ids), "token_ids": list(ids)})
        self.finish_reason = finish_reason
        if finish_reason == "length" or len(self.response) >= self.budget:
            self.finish("length")
        elif self.model_turns >= self.max_turns:
            self.finish(finish_reason)

    def add_observation(self, ids: Sequence[int], text: str, *, cut: bool = False) -> bool:
        """Append an observation (masked). False, and the episode ends as ``"length"``, when it would leave fewer
        than ``min_turn_tokens`` for the next model turn."""
        if len(self.response) + len(ids) + self.min_turn_tokens > self.budget:
            self.budget_truncated = True
            self.finish("length")
            return False
        self.response += list(ids)
        self.mask += [False] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.turns.append({"role": "tool", "text": text, "num_tokens": len(ids), "cut": cut})
        self.observation_cuts += int(cut)
        return True

    def finish(self, reason: str, error: str | None = None) -> None:
        self.done, self.finish_reason = True, reason
        if error is not None:
            self.error = error

    def to_completion(self, prompt_index: int, sample_index: int, *, text: str, with_logprobs: bool) -> Completion:
        """The finished sample as a :class:`Completion`: the loss mask holds the observation holes; ``turns`` keeps
        each turn's text and token count (not its ids) for dumps and metrics."""
        turns = [{k: v for k, v in t.items() if k != "token_ids"} for t in self.turns]
        return Completion(
            prompt_index=prompt_index,
            sample_index=sample_index,
            prompt_token_ids=list(self.prompt_ids),
            token_ids=list(self.response),
            text=text,
            finish_reason=self.finish_reason or "stop",
            logprobs=list(self.logprobs) if with_logprobs else None,
            loss_mask=None if all(self.mask) else list(self.mask),
            turns=turns,
            env_reward=self.env_reward,
            env_error=self.error,
        )

"""The tokens of a tool message, from the tokenizer's own chat template: token in, token out.

A multi-turn response is the model's turns (the ids the engine generated, kept verbatim) with observations between
them. An observation is appended as the chat template's tokens that close the model's turn, hold a ``tool`` message
and open the next assistant turn; for ChatML (Qwen2, SmolLM2, our tiny models) after the model's ``<|im_end|>``:

    "\\n<|im_start|>tool\\n{observation}<|im_end|>\\n<|im_start|>assistant\\n"

(Qwen2.5's template writes ``<|im_start|>user\\n<tool_response>\\n...\\n</tool_response>`` instead: whatever the
template says is what is appended). The history is never re-tokenised, so the ids the trainer sees are the ids the
engine sampled.

:class:`ToolMessageTokens` finds these pieces once by rendering two small conversations with sentinel texts;
:func:`retokenize_difference` is the check mode: it renders the same conversation in one piece with the template and
reports the first response position where the two token sequences differ (peers lost turn separators this way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

_USER = "reasonrl-user-7f3a"
_ASSISTANT = "reasonrl-assistant-7f3a"
_TOOL = "reasonrl-tool-7f3a"


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot frame tool messages (multi-turn rollouts need one that can)."""


@dataclasses.dataclass(frozen=True)
class ToolMessageTokens:
    """The text around one tool message in the tokenizer's chat template.

    Attributes:
        eos_text / eos_id: the end-of-turn token the model stops on (the tokenizer's EOS).
        close: the text the template writes after an assistant message's content (``"<|im_end|>\\n"``); it starts
            with ``eos_text``.
        before / after: the text before and after a tool message's content, the generation prompt of the next
            assistant turn included in ``after``.
    """

    eos_text: str
    eos_id: int
    close: str
    before: str
    after: str

    @classmethod
    def from_tokenizer(cls, tokenizer) -> ToolMessageTokens:
        """Read the pieces from ``tokenizer.chat_template``; :class:`ChatTemplateError` when there is none or it does
        not render a ``tool`` message after an assistant turn the way the rollout needs."""
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat_template: multi-turn rollouts need it")
        if tokenizer.eos_token is None:
            raise ChatTemplateError("the tokenizer has no eos_token: a model turn could not end")
        user = [{"role": "user", "content": _USER}]
        with_assistant = _render(tokenizer, user + [{"role": "assistant", "content": _ASSISTANT}], False)
        with_tool = _render(
            tokenizer,
            user + [{"role": "assistant", "content": _ASSISTANT}, {"role": "tool", "content": _TOOL}],
            True,
        )
        end = with_assistant.find(_ASSISTANT)
        if end < 0 or not with_tool.startswith(with_assistant):
            raise ChatTemplateError(
                "the chat template renders an assistant turn differently when a tool message follows it; "
                "multi-turn rollouts need the turns rendered independently"
            )
        close = with_assistant[end + len(_ASSISTANT) :]
        if not close.startswith(tokenizer.eos_token):
            raise ChatTemplateError(
                f"the chat template closes an assistant turn with {close!r}, which does not start with the EOS token "
                f"{tokenizer.eos_token!r}: the model's end of turn would not match the template"
            )
        tool_part = with_tool[len(with_assistant) :]
        if tool_part.count(_TOOL) != 1:
            raise ChatTemplateError("the chat template does not render the content of a 'tool' message")
        before, after = tool_part.split(_TOOL)
        return cls(tokenizer.eos_token, int(tokenizer.eos_token_id), close, before, after)

    def observation_text(self, observation: str, *, turn_ended_with_eos: bool) -> str:
        """The text appended after a model turn: the rest of the turn's close, the tool message, the next assistant
        turn's prompt. A turn that did not end with EOS (a stop string) gets the whole close, EOS included."""
        close = self.close[len(self.eos_text) :] if turn_ended_with_eos else self.close
        return close + self.before + observation + self.after

    def observation_ids(self, tokenizer, observation: str, *, turn_ended_with_eos: bool) -> list[int]:
        """:meth:`observation_text` as token ids (no extra special tokens)."""
        text = self.observation_text(observation, turn_ended_with_eos=turn_ended_with_eos)
        return list(tokenizer(text, add_special_tokens=False).input_ids)


def retokenize_difference(
    tokenizer, response_ids: Sequence[int], turns: Sequence[dict], eos_id: int
) -> tuple[int, list[int], list[int]] | None:
    """The check mode of multi-turn rollouts: render the conversation after a one-line user prompt in one piece
    with the chat template, tokenize it, and compare with the response as the rollout built it.

    ``turns``: the episode's turns in order, ``{"role": "assistant" | "tool", "token_ids": [...]}`` for the model's
    and ``{"role": "tool", "text": observation}`` for the environment's. Returns None when the response equals the
    rendering (up to its length), else ``(position, rollout ids, rendered ids)`` around the first difference.
    """
    messages: list[dict] = [{"role": "user", "content": _USER}]
    for turn in turns:
        if turn["role"] == "assistant":
            ids = [t for t in turn["token_ids"] if t != eos_id]
            messages.append({"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=False)})
        else:
            messages.append({"role": "tool", "content": turn["text"]})
    prompt = _render(tokenizer, messages[:1], True)
    full = _render(tokenizer, messages, messages[-1]["role"] == "tool")
    if not full.startswith(prompt):
        return 0, list(response_ids[:8]), []
    rendered = list(tokenizer(full[len(prompt) :], add_special_tokens=False).input_ids)
    for pos, token in enumerate(response_ids):
        if pos >= len(rendered) or rendered[pos] != token:
            return pos, list(response_ids[max(0, pos - 4) : pos + 4]), rendered[max(0, pos - 4) : pos + 4]
    return None


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

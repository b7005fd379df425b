"""Token ids of a session's prompt and of the messages an agent adds between model turns, from the tokenizer's own
chat template, without ever re-tokenising what the model generated.

* The prompt: the first request (or the first after a fork) rendered whole, ``tools=`` passed to the template,
  ``add_generation_prompt=True``.
* The messages added after a model turn (tool results, user messages): rendered in a fixed framing, a sentinel user
  message and a sentinel assistant turn followed by the new messages (generation prompt added); the text after the
  sentinel assistant content is the assistant turn's close, the new messages and the next assistant prompt. The model
  stopped on the end-of-turn token (``<|im_end|>`` in ChatML), which the close starts with, so that token is dropped
  from the appended text when the turn ended with it (the whole close is kept otherwise, a turn cut by ``max_tokens``
  or a stop string), as :meth:`reasonrl.agents.chat_tokens.ToolMessageTokens.observation_text` does for one tool
  message. The sentinel assistant turn holds no ``<think>`` and no tool calls, so a template that strips reasoning
  from earlier turns (Qwen3) or rewrites history renders it the same; the recorded tokens are never re-rendered.
  (``ToolMessageTokens.from_tokenizer`` itself refuses Qwen3-style templates: they render the last assistant turn
  with an empty ``<think>`` block and drop it once a message follows; this framing never renders an assistant turn
  last, so it reads such templates too.)

Assumption (checked where it can be, :class:`~reasonrl.agents.chat_tokens.ChatTemplateError` otherwise): the
template renders an assistant message's content verbatim followed by a close that starts with the EOS text, and the
rendering of later messages does not depend on the earlier assistant message's tool calls (true for ChatML, Qwen2.5
and Qwen3 templates, whose tool messages do not refer back to a call).
"""

from __future__ import annotations

from reasonrl.agents.chat_tokens import ChatTemplateError

_USER = "reasonrl-gateway-user-5d1c"
_ASSISTANT = "reasonrl-gateway-assistant-5d1c"


class ChatFraming:
    """The tokenizer's chat template, as the gateway uses it (see the module docstring)."""

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat_template: the agent gateway renders requests with it")
        if tokenizer.eos_token is None:
            raise ChatTemplateError("the tokenizer has no eos_token: a model turn could not end")
        self.tokenizer = tokenizer
        self.eos_text: str = tokenizer.eos_token
        self.eos_id: int = int(tokenizer.eos_token_id)
        self.appended_text([{"role": "tool", "content": "7"}], None, turn_ended_with_eos=True)  # checks the template

    def render(self, messages: list[dict], tools: list[dict] | None) -> str:
        """The whole conversation with the generation prompt: the text of a prompt."""
        return _render(self.tokenizer, messages, tools, add_generation_prompt=True)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The token ids of :meth:`render` (no special tokens added: the template writes its own)."""
        return self.encode(self.render(messages, tools))

    def appended_text(self, new_messages: list[dict], tools: list[dict] | None, *, turn_ended_with_eos: bool) -> str:
        """The text appended after a model turn for ``new_messages`` (may be empty: then only the close of the turn
        and the next generation prompt)."""
        framing = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _ASSISTANT}]
        text = _render(self.tokenizer, framing + list(new_messages), tools, add_generation_prompt=True)
        if text.count(_ASSISTANT) != 1:
            raise ChatTemplateError("the chat template does not render an assistant message's content once, verbatim")
        after = text[text.index(_ASSISTANT) + len(_ASSISTANT) :]
        eos = self.eos_text
        if not after.startswith(eos):
            raise ChatTemplateError(
                f"the chat template closes an assistant turn followed by {[m['role'] for m in new_messages]} with "
                f"{after[:40]!r}, which does not start with the EOS token {eos!r}"
            )
        return after[len(eos) :] if turn_ended_with_eos else after

    def appended_ids(
        self, new_messages: list[dict], tools: list[dict] | None, *, turn_ended_with_eos: bool
    ) -> list[int]:
        """:meth:`appended_text` as token ids."""
        return self.encode(self.appended_text(new_messages, tools, turn_ended_with_eos=turn_ended_with_eos))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)


def _render(tokenizer, messages: list[dict], tools: list[dict] | None, *, add_generation_prompt: bool) -> str:
    kwargs = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
    )

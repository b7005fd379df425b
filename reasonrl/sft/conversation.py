"""SFT on conversations (``response_field="messages"``): a chat row's reply turns as one response with a loss mask.

A multi-turn rollout's response is the model's turns (each ending with EOS) with the environment's text between them
(:mod:`reasonrl.agents.chat_tokens`): after a model turn's ``<|im_end|>``, the rest of the template's close, the tool
message and the next assistant turn's generation prompt, tokenized as one piece. A conversation
``[user, assistant(call), tool, assistant(answer)]`` is encoded the same way, from the chat template's own rendering:

    prompt    <|im_start|>user\\nWhat is 4821 * 937?<|im_end|>\\n<|im_start|>assistant\\n   the template's render
    response  <tool_call>...</tool_call><|im_end|>                                trained (an assistant turn)
              \\n<|im_start|>tool\\n4517277<|im_end|>\\n<|im_start|>assistant\\n   masked (the rollout appends it)
              The answer is \\boxed{4517277}.<|im_end|>                              trained

Trained: each assistant turn's content and its EOS; masked: everything else (tool turns, turn headers, the template's
text after EOS). Each piece is tokenized on its own, as the rollout tokenizes its observations. The prompt is the
template's rendering of the row (:meth:`reasonrl.data.templates.ChatTemplate.conversation`), so SFT and RL see the same
prompt; the turns after it come from the row's ``reply_messages`` (what ``load_rows(..., keep_reply=True)`` keeps) or,
for an in-memory row, from its full ``messages``.
"""

from __future__ import annotations

from typing import Any

from reasonrl.data.chat import split_messages


class ConversationError(ValueError):
    """A row cannot be encoded as a conversation (no reply turn, a template that renders turns dependently...)."""


def reply_turns(row: dict[str, Any]) -> list[dict]:
    """The turns after the prompt: ``row["reply_messages"]`` when present, else those of ``row["messages"]``."""
    if "reply_messages" in row:
        return list(row["reply_messages"])
    if "messages" not in row:
        raise ConversationError("has no messages to take a reply from (response_field='messages' needs chat rows)")
    return split_messages(row["messages"])[1]


def conversation_pieces(row: dict[str, Any], template) -> tuple[str, list[tuple[str, bool]]]:
    """``(prompt text, [(text, trained), ...])`` of a chat row (see the module docstring). ``template`` is a
    :class:`~reasonrl.data.templates.ChatTemplate`."""
    if not hasattr(template, "conversation"):
        raise ConversationError("response_field='messages' needs prompt_template=chat (the tokenizer's chat template)")
    tokenizer = template.tokenizer
    eos = tokenizer.eos_token
    messages, kwargs = template.conversation(row)
    reply = reply_turns(row)
    if not any(turn["role"] == "assistant" for turn in reply):
        raise ConversationError("has no assistant turn after its prompt: nothing to train on")

    def render(turns: list[dict], generation_prompt: bool) -> str:
        return tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=generation_prompt, **kwargs)

    def after(text: str, done: str) -> str:
        if not text.startswith(done):
            raise ConversationError(
                "the chat template renders earlier turns differently once a later turn follows; SFT on "
                "conversations needs each turn rendered independently (as multi-turn rollouts do)"
            )
        return text[len(done) :]

    prompt = done = render(messages, True)
    pieces: list[tuple[str, bool]] = []
    pending, convo = "", list(messages)
    for i, turn in enumerate(reply):
        if turn["role"] == "tool" and not any(t["role"] == "assistant" for t in reply[i:]):
            break  # trailing tool turns: nothing to train after them
        if turn["role"] == "assistant":
            header = render(convo, True)  # the generation prompt of this turn: masked
            pending += after(header, done)
            convo.append(turn)
            text = render(convo, False)
            segment = after(text, header)
            cut = segment.rfind(eos)
            if cut < 0:
                raise ConversationError(f"the chat template does not close reply turn {i} with EOS {eos!r}")
            trained = segment[: cut + len(eos)]
            for call in turn.get("tool_calls") or ():
                if call["function"]["name"] not in trained:
                    raise ConversationError(
                        f"reply turn {i} has OpenAI-style tool_calls that the chat template does not render; write "
                        "the call in the turn's content instead (<tool_call>{...}</tool_call>)"
                    )
            if pending:
                pieces.append((pending, False))
            pieces.append((trained, True))
            pending, done = segment[cut + len(eos) :], text
        else:
            convo.append(turn)
            text = render(convo, False)
            pending += after(text, done)
            done = text
    return prompt, pieces


def encode_conversation(row: dict[str, Any], template, max_prompt_len: int) -> tuple[list[int], list[int], list[bool]]:
    """``(prompt ids, response ids, loss mask)`` of a chat row: the prompt left-truncated to ``max_prompt_len``, the
    response the pieces of :func:`conversation_pieces` tokenized one by one (no special tokens added), the mask True
    on the assistant turns' tokens."""
    prompt, pieces = conversation_pieces(row, template)
    tokenizer = template.tokenizer
    response: list[int] = []
    mask: list[bool] = []
    for text, trained in pieces:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        response += ids
        mask += [trained] * len(ids)
    return tokenizer(prompt, add_special_tokens=False).input_ids[-max_prompt_len:], response, mask

"""Chat prompts: a row whose prompt is a ``messages`` list of ``{"role", "content"}`` turns.

    messages = [{"role": "system", "content": "Answer in one line."},
                {"role": "user", "content": "What is 2+3?"},
                {"role": "assistant", "content": "5"}]           # a final reference reply: not part of the prompt
    prompt_messages(messages)   # -> the system and user turns
    last_user_text(messages)    # -> "What is 2+3?"

The prompt is every turn up to and including the last ``user`` turn; what follows it may only be ``assistant``
turns (a reference reply), which are left out. Roles are ``system``, ``user`` and ``assistant``; ``content`` is a
string. Anything else (ShareGPT's ``{"from", "value"}``, a list without a user turn) is a ``ValueError`` saying
what is wrong; callers add which row it is.
"""

from __future__ import annotations

from typing import Any

CHAT_ROLES = ("system", "user", "assistant")


def prompt_messages(value: Any) -> list[dict[str, str]]:
    """The prompt turns of a chat ``messages`` value (see the module docstring), each as ``{"role", "content"}``;
    ``ValueError`` when ``value`` is not a list of such turns with at least one user turn."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"messages must be a non-empty list of {{role, content}} turns, got {_describe(value)}")
    turns = []
    for i, turn in enumerate(value):
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str) or "content" not in turn:
            keys = sorted(turn) if isinstance(turn, dict) else type(turn).__name__
            raise ValueError(f"messages[{i}] is not a {{role, content}} turn (it has {keys})")
        if turn["role"] not in CHAT_ROLES:
            raise ValueError(f"messages[{i}] has role {turn['role']!r}; roles are {', '.join(CHAT_ROLES)}")
        if not isinstance(turn["content"], str):
            raise ValueError(f"messages[{i}] content must be a string, got {type(turn['content']).__name__}")
        turns.append({"role": turn["role"], "content": turn["content"]})
    users = [i for i, turn in enumerate(turns) if turn["role"] == "user"]
    if not users:
        raise ValueError(f"messages has no user turn (roles: {[t['role'] for t in turns]})")
    if not turns[users[-1]]["content"].strip():
        raise ValueError(f"messages[{users[-1]}] (the last user turn) is empty")
    return turns[: users[-1] + 1]


def last_user_text(messages: Any) -> str:
    """The text of the last user turn of a chat ``messages`` value (the row's ``question``), stripped."""
    turns = prompt_messages(messages)
    return turns[-1]["content"].strip()


def _describe(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "an empty list"
    return type(value).__name__

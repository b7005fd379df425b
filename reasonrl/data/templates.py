"""Prompt templates: ORZ's R1-Zero style prompt, the tokenizer's chat template, or a user jinja2 file.

    template = get_template("orz")                          # R1-Zero style: <think>/<answer> tags, \\boxed{}
    template = get_template("chat", tokenizer=tok)          # tokenizer.apply_chat_template
    template = get_template("prompts/my_template.jinja")    # a user file (variables: question + row fields)
    prompt = template.render(row)                           # row = {"question": ..., "answer": ..., ...}

The ORZ template is plain text meant to be tokenized without special tokens (ORZ uses no chat template): it
ends with ``Assistant: <think>`` so the model starts inside its reasoning, and generation should stop at
``ORZ_STOP`` (``</answer>`` included in the output, so the answer tag is closed). ``bos_token`` (default empty,
as for Qwen) is prepended when a template uses it.

User templates are rendered in a sandboxed jinja2 environment (no attribute access to Python internals) with
``StrictUndefined``, so a misspelt or missing variable is an error naming it, not a silently empty string.
The gold ``answer`` is deliberately not passed to templates unless ``expose_answer=True``.

Chat rows (a ``messages`` list of prompt turns, :mod:`reasonrl.data.chat`; the loader makes them from chat
datasets) render their own turns: the ``chat`` template passes the system and user turns as they are to
``tokenizer.apply_chat_template`` (``add_generation_prompt=True``; its ``system_prompt`` is added only when the row
has no system turn, its instruction is not applied). The ``orz`` and ``plain`` templates render a chat row's
``question`` (its last user turn) only when that loses nothing (one user turn, no system turn); otherwise they
refuse it (use ``prompt_template=chat``). A user jinja2 file gets ``messages`` as a variable. A malformed
``messages`` value is a :class:`reasonrl.data.sources.DataFormatError` naming the row.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, TemplateError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from reasonrl.data.chat import prompt_messages
from reasonrl.data.sources import DataFormatError

# Our wording of the DeepSeek-R1-Zero / Open-Reasoner-Zero prompt (same structure: a system preamble describing
# the <think>/<answer> protocol, a "User:" turn with the instruction and the problem, then "Assistant: <think>").
ORZ_TEMPLATE = (
    "{{ bos_token }}A conversation between User and Assistant. The User asks a question and the Assistant solves "
    "it. The Assistant first thinks through the reasoning process in its mind and then gives the User the answer. "
    "The reasoning process is enclosed within <think> </think> tags and the answer within <answer> </answer> tags, "
    "i.e., <think> reasoning process here </think> <answer> answer here </answer>. "
    "User: Put your answer inside <answer> </answer> tags, i.e., <answer> answer here </answer>, and write the "
    "final result in \\boxed{}, because it will be extracted automatically from the \\boxed{} tag.\n"
    "This is the problem:\n{{ question }}\nAssistant: <think>"
)

# Stop strings for generation with the ORZ template (vLLM: include_stop_str_in_output=True keeps "</answer>").
ORZ_STOP = ("User:", "Human:", "Assistant:", "</answer>")

# Default user-turn text of the chat template.
CHAT_INSTRUCTION = "{{ question }}\nPlease reason step by step, and put your final answer within \\boxed{}."

_ENV = ImmutableSandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False)


class TemplateRenderError(ValueError):
    """A template could not be rendered (missing variable, syntax error); the message names the template."""


def chat_turns(row: dict[str, Any]) -> list[dict[str, str]] | None:
    """The prompt turns of a chat row (one with a ``messages`` field), ``None`` for a text row; a malformed
    ``messages`` value is a ``DataFormatError`` naming the row."""
    if "messages" not in row:
        return None
    try:
        return prompt_messages(row["messages"])
    except ValueError as exc:
        raise DataFormatError(f"row {row.get('id', '?')!r}: {exc}") from None


def _variables(row: dict[str, Any], expose_answer: bool, extra: dict[str, Any]) -> dict[str, Any]:
    if "question" not in row:
        raise TemplateRenderError(f"row {row.get('id', '?')!r} has no 'question' field")
    values = {k: v for k, v in row.items() if expose_answer or k not in ("answer", "solution")}
    return {**extra, **values}


class JinjaTemplate:
    """A jinja2 prompt template rendered in a sandbox with ``StrictUndefined``.

    Variables: ``question`` and the other row fields (``answer``/``solution`` only with ``expose_answer``),
    ``bos_token`` (default ``""``) and any ``extra`` values given here. ``renders_messages``: whether the template
    may use a chat row's ``messages`` (user files); when False (``orz``, ``plain``) a chat row that has a system
    turn or several user turns is refused, as rendering its question alone would drop them.
    """

    def __init__(
        self,
        source: str,
        name: str = "<template>",
        expose_answer: bool = False,
        renders_messages: bool = True,
        **extra: Any,
    ):
        self.name = name
        self.expose_answer = expose_answer
        self.renders_messages = renders_messages
        self.extra = {"bos_token": "", **extra}
        try:
            self.template = _ENV.from_string(source)
        except TemplateError as exc:
            raise TemplateRenderError(f"template {name}: syntax error: {exc}") from exc

    @classmethod
    def from_file(cls, path: str | os.PathLike, **kwargs: Any) -> JinjaTemplate:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"prompt template file {str(path)!r} does not exist")
        return cls(path.read_text(encoding="utf-8"), name=str(path), **kwargs)

    def render(self, row: dict[str, Any]) -> str:
        turns = chat_turns(row)
        if turns is not None and not self.renders_messages and len(turns) > 1:
            raise TemplateRenderError(
                f"template {self.name}: row {row.get('id', '?')!r} is a chat prompt with "
                f"{', '.join(t['role'] for t in turns)} turns; this template renders the question (last user turn) "
                "alone and would drop the others: use prompt_template=chat (the tokenizer's chat template)"
            )
        try:
            return self.template.render(**_variables(row, self.expose_answer, self.extra))
        except UndefinedError as exc:
            raise TemplateRenderError(f"template {self.name}: {exc} (row {row.get('id', '?')!r})") from exc
        except TemplateError as exc:
            raise TemplateRenderError(f"template {self.name}: {exc}") from exc


class ChatTemplate:
    """The tokenizer's own chat template: ``[system] + user(instruction)`` -> ``tokenizer.apply_chat_template``.

    ``instruction`` is a jinja2 string rendered like ``JinjaTemplate`` (default: the question plus "reason step
    by step ... \\boxed{}"). The result is text (``tokenize=False``) with the generation prompt appended.
    A chat row (``messages``) renders its own system and user turns instead (``system_prompt`` first when it has
    no system turn; no instruction).
    """

    def __init__(
        self,
        tokenizer: Any,
        system_prompt: str | None = None,
        instruction: str = CHAT_INSTRUCTION,
        tool_schemas: dict[str, dict] | None = None,
    ):
        if getattr(tokenizer, "chat_template", None) is None:
            raise TemplateRenderError("the tokenizer has no chat_template; use the 'orz' or a jinja file template")
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.instruction = JinjaTemplate(instruction, name="chat instruction")
        self.tool_schemas = dict(tool_schemas or {})  # multi-turn tools: name -> JSON schema, shown to the model

    def render(self, row: dict[str, Any]) -> str:
        messages, kwargs = self.conversation(row)
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)

    def conversation(self, row: dict[str, Any]) -> tuple[list[dict], dict[str, Any]]:
        """``(messages, kwargs)`` that :meth:`render` gives ``apply_chat_template``: the prompt turns (the row's own
        or system + instruction) and ``tools`` when the row offers any (SFT renders a reply after them the same
        way)."""
        turns = chat_turns(row)
        if turns is not None:
            has_system = any(turn["role"] == "system" for turn in turns)
            system = [] if has_system or not self.system_prompt else [{"role": "system", "content": self.system_prompt}]
            messages = system + turns
        else:
            messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
            messages.append({"role": "user", "content": self.instruction.render(row)})
        tools = self._row_tools(row)
        return messages, ({"tools": tools} if tools else {})

    def _row_tools(self, row: dict[str, Any]) -> list[dict]:
        """The schemas of the tools this row offers (its ``tools`` field, else every configured one), passed to
        the chat template (Qwen's lists them in the system turn; a template that ignores ``tools`` shows none)."""
        names = row.get("tools")
        if not self.tool_schemas:
            return []
        if names is None:
            return list(self.tool_schemas.values())
        return [self.tool_schemas[n] for n in names if n in self.tool_schemas]


def orz_template(bos_token: str = "") -> JinjaTemplate:
    """ORZ's R1-Zero style prompt (see ``ORZ_TEMPLATE``)."""
    return JinjaTemplate(ORZ_TEMPLATE, name="orz", renders_messages=False, bos_token=bos_token)


def get_template(spec: str, tokenizer: Any = None, **kwargs: Any) -> JinjaTemplate | ChatTemplate:
    """A template from a spec: ``orz`` (alias ``r1_zero``), ``chat`` (needs ``tokenizer``), ``plain`` (the
    question alone), or the path of a jinja2 file. ``kwargs`` go to the template class."""
    if spec in ("orz", "r1_zero"):
        bos = kwargs.pop("bos_token", "")
        return orz_template(bos_token=bos)
    if spec == "plain":
        return JinjaTemplate("{{ question }}", name="plain", renders_messages=False, **kwargs)
    if spec == "chat":
        if tokenizer is None:
            raise ValueError("the 'chat' template needs a tokenizer")
        return ChatTemplate(tokenizer, **kwargs)
    path = Path(spec).expanduser()
    if path.suffix in (".jinja", ".j2", ".jinja2", ".txt") or path.exists():
        return JinjaTemplate.from_file(path, **kwargs)
    raise ValueError(f"unknown template {spec!r}: use 'orz', 'chat', 'plain' or the path of a jinja2 file")


def render_prompts(rows: Sequence[dict[str, Any]], template: JinjaTemplate | ChatTemplate) -> list[str]:
    """``template.render(row)`` for every row."""
    return [template.render(row) for row in rows]

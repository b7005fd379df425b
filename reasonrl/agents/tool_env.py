"""The built-in tool environment (``env_fn=tools``): the model calls tools, the environment answers with their output.

    env = ToolEnvironment(tools=("calculator", "python"), max_calls_per_turn=1)
    env.reset(row)                        # row["tools"], when present, restricts this sample's tools
    env.step('<tool_call>\\n{"name": "calculator", "arguments": {"expression": "12*34"}}\\n</tool_call>')
        -> StepResult(observation="408", info={"tool_calls": {"calculator": 1}})
    env.step("The answer is 408.")      -> StepResult(done=True)

One step, from the text of one model turn (calls parsed by :func:`~reasonrl.agents.tool_calls.parse_tool_calls`):

* no ``<tool_call>`` at all: the turn is the answer, ``done=True``;
* every block that does not parse (bad JSON, no name, ...) answers ``{"error": "..."}``, counted in
  ``info["tool_errors"]["invalid"]``;
* the first ``max_calls_per_turn`` calls run (:func:`~reasonrl.agents.tools.call_tool`): their outputs, counted in
  ``info["tool_calls"][name]``, or their errors (an unknown tool, bad arguments, a tool that raised), counted in
  ``info["tool_errors"][name]``; calls past the cap are not run and answered with an error (counted in
  ``info["tool_calls_skipped"]``);
* the observation is the answers (trailing newlines dropped) joined by ``"\\n"``, parse errors first, then the
  calls in order.

Tools given by name are resolved once per environment; :func:`reasonrl.agents.loading.load_env_factory` resolves
them once for a whole run and passes the :class:`~reasonrl.agents.tools.Tool` objects (their state is the python
tool's sandbox, which holds no process between calls and is safe to share across threads).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reasonrl.agents.environment import StepResult
from reasonrl.agents.tool_calls import parse_tool_calls
from reasonrl.agents.tools import MAX_OUTPUT_CHARS, Tool, call_tool, error_text, resolve_tools

INVALID = "invalid"  # the info counter name of calls that do not parse


class ToolEnvironment:
    """The environment of the module docstring.

    Args:
        tools: tool names / specs (resolved with :func:`~reasonrl.agents.tools.resolve_tools`), :class:`Tool`
            objects, or a ``{name: Tool}`` mapping.
        max_calls_per_turn: calls run per model turn (at least 1).
        max_output_chars: characters of one call's output kept (cut in the middle).
    """

    def __init__(
        self,
        tools: Sequence[str | Tool] | Mapping[str, Tool] = ("calculator",),
        max_calls_per_turn: int = 1,
        *,
        max_output_chars: int = MAX_OUTPUT_CHARS,
    ):
        if max_calls_per_turn < 1:
            raise ValueError(f"max_calls_per_turn must be >= 1, got {max_calls_per_turn}")
        self.tools = _as_tools(tools)
        self.max_calls_per_turn = max_calls_per_turn
        self.max_output_chars = max_output_chars
        self.active: dict[str, Tool] = dict(self.tools)

    def tool_schemas(self) -> list[dict]:
        """The schemas of this sample's tools (all configured ones before :meth:`reset`), for
        ``tokenizer.apply_chat_template(messages, tools=env.tool_schemas())``."""
        return [tool.schema for tool in self.active.values()]

    def reset(self, row: dict) -> None:
        """Start a sample. ``row["tools"]`` (optional): the names (or specs) of the configured tools this sample may
        call; a name that is not configured is a ``ValueError`` naming the row's tools. Returns None: the prompt is
        the data template's rendering of the row."""
        wanted = row.get("tools") if isinstance(row, Mapping) else None
        if wanted is None:
            self.active = dict(self.tools)
            return None
        if isinstance(wanted, str) or not isinstance(wanted, Sequence):
            raise ValueError(f"row 'tools' must be a list of tool names, got {wanted!r}")
        by_spec = {tool.spec: tool for tool in self.tools.values()}
        active: dict[str, Tool] = {}
        unknown = []
        for name in wanted:
            tool = self.tools.get(name) if isinstance(name, str) else None
            tool = tool or (by_spec.get(name) if isinstance(name, str) else None)
            if tool is None:
                unknown.append(name)
            else:
                active[tool.name] = tool
        if unknown:
            raise ValueError(
                f"row 'tools' {list(wanted)!r} names {unknown!r}, which the tool environment was not configured with "
                f"(configured: {list(self.tools)}); add them to the config's tools or fix the row"
            )
        self.active = active
        return None

    def step(self, model_turn: str) -> StepResult:
        """Answer one model turn (see the module docstring)."""
        calls, errors = parse_tool_calls(model_turn)
        if not calls and not errors:
            return StepResult(done=True)
        answers: list[str] = []
        counts: dict[str, dict[str, int]] = {"tool_calls": {}, "tool_errors": {}}
        for message in errors:
            answers.append(error_text(message))
            _count(counts["tool_errors"], INVALID)
        for call in calls[: self.max_calls_per_turn]:
            text, failed = call_tool(self.active, call, max_chars=self.max_output_chars)
            answers.append(text)
            _count(counts["tool_errors" if failed else "tool_calls"], call.name)
        skipped = calls[self.max_calls_per_turn :]
        if skipped:
            names = ", ".join(repr(call.name) for call in skipped)
            answers.append(error_text(f"only {self.max_calls_per_turn} tool call(s) run per turn; not run: {names}"))
            counts["tool_calls_skipped"] = {"all": len(skipped)}
        info = {key: value for key, value in counts.items() if value}
        return StepResult(observation="\n".join(answer.rstrip("\n") for answer in answers), info=info)


def _as_tools(tools: Sequence[str | Tool] | Mapping[str, Tool]) -> dict[str, Tool]:
    if isinstance(tools, Mapping):
        return dict(tools)
    if isinstance(tools, str):
        tools = [tools]
    names = [t for t in tools if not isinstance(t, Tool)]
    resolved = iter(resolve_tools(names).values()) if names else iter(())
    out: dict[str, Tool] = {}
    for item in tools:
        tool = item if isinstance(item, Tool) else next(resolved)
        if tool.name in out:
            raise ValueError(f"two tools are named {tool.name!r}")
        out[tool.name] = tool
    if not out:
        raise ValueError("the tool environment needs at least one tool")
    return out


def _count(counter: dict[str, int], name: str) -> None:
    counter[name] = counter.get(name, 0) + 1

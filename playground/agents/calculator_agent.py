"""The calculator task as an agent program (``python -m reasonrl.demo --task agent``, docs/agents.md).

An ordinary OpenAI tool loop, the kind an agent written for any OpenAI-compatible server has: the question goes to
``chat.completions.create`` with the calculator's JSON schema in ``tools``; each tool call the model makes is run
here and its result appended as a ``tool`` message; the loop ends when the model answers without a call (or after
``MAX_TURNS`` model turns, or when the session's token budget ends it). The reward is left to the row's verifier
(``reward=None``): the last ``\\boxed{}`` of the answer against the product.

Trained with ``agent_fn=playground.agents.calculator_agent:run`` (``playground/agent_grpo_cpu.py``).
"""

from __future__ import annotations

import asyncio
import json
import weakref

from openai import AsyncOpenAI

from reasonrl.agents import AgentResult
from reasonrl.agents.calculator import calculate

MAX_TURNS = 3  # model turns; the last one is the answer (env_fn=tools' max_turns in the tools demo)
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly: + - * / // % ** and parentheses on integers and "
        "decimals.",
        "parameters": {
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": 'the expression, e.g. "4821 * 937" or "(2.5 + 3) / 4"',
                }
            },
            "required": ["expression"],
        },
    },
}


_CLIENTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its shared AsyncOpenAI client


def client_for(endpoint) -> AsyncOpenAI:
    """The session's client: one ``AsyncOpenAI`` per event loop (making one loads the system's CA certificates,
    ~50 ms of CPU), each session's a ``with_options`` copy with its own URL and key over the same connection pool."""
    loop = asyncio.get_running_loop()
    shared = _CLIENTS.get(loop)
    if shared is None:
        shared = _CLIENTS[loop] = AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    return shared.with_options(base_url=endpoint.base_url, api_key=endpoint.api_key)


def run_tool(name: str, arguments: str) -> str:
    """The tool message for one call: the calculator's result, or ``{"error": ...}`` for anything that fails."""
    try:
        if name != "calculator":
            raise ValueError(f"unknown tool {name!r}; available tools: calculator")
        args = json.loads(arguments)
        result = calculate(args["expression"])
    except Exception as exc:  # noqa: BLE001 - every failure is the model's observation
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"})
    return result if isinstance(result, str) else json.dumps(result)


async def run(row: dict, endpoint) -> AgentResult:
    """One episode of the tool loop on ``row`` (its ``messages``: the user's question)."""
    messages = [dict(m) for m in row["messages"]]
    calls = 0
    client = client_for(endpoint)
    for _ in range(MAX_TURNS):
        reply = await client.chat.completions.create(model=endpoint.model, messages=messages, tools=[CALCULATOR])
        choice = reply.choices[0]
        messages.append(choice.message.model_dump(exclude_none=True))
        if not choice.message.tool_calls or choice.finish_reason == "length":
            break
        for call in choice.message.tool_calls:
            calls += 1
            content = run_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return AgentResult(reward=None, info={"tool_calls": {"calculator": calls}})

"""A model turn split into content and tool calls exactly as ``env_fn=tools`` parses it; messages normalised and
compared the way "extends" needs."""

from __future__ import annotations

import pytest

from reasonrl.agents.gateway.messages import (
    MessageError,
    normalize_messages,
    same_message,
    split_reply,
    tool_call_id,
)
from reasonrl.agents.tool_calls import format_tool_call, parse_tool_calls

CALC = format_tool_call("calculator", {"expression": "12*34"})
PY = format_tool_call("python", {"code": "print(1)"})

TURNS = [
    "The answer is 408.",
    CALC,
    "Let me compute.\n" + CALC,
    f"First {CALC} then {PY} done",
    '<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}\n</tool_call>',
    "<tool_call>{not json}</tool_call> and " + CALC,
    "<tool_call>\n" + CALC,  # the first block is unclosed
    CALC + " <tool_call> never closed",
    "</tool_call> stray close " + CALC,
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
]


@pytest.mark.parametrize("text", TURNS)
def test_the_calls_are_the_tool_environments_calls(text):
    reply = split_reply(text, "s1", 0)
    calls, errors = parse_tool_calls(text)
    assert list(reply.calls) == calls
    if not errors:  # every block became a call: none of the call text is left in the content
        assert "<tool_call>" not in reply.content
    assert len(set(reply.call_ids)) == len(calls)


def test_content_outside_the_blocks_and_bad_blocks_kept():
    assert split_reply("Let me compute.\n" + CALC, "s", 0).content == "Let me compute."
    assert split_reply(f"First {CALC} then {PY} done", "s", 0).content == "First  then  done"
    reply = split_reply("<tool_call>{not json}</tool_call> and " + CALC, "s", 0)
    assert reply.content == "<tool_call>{not json}</tool_call> and" and [c.name for c in reply.calls] == ["calculator"]
    assert split_reply(CALC, "s", 0).content == ""


def test_tool_call_ids_are_deterministic_per_session_turn_and_position():
    assert tool_call_id("s", 1, 0) == tool_call_id("s", 1, 0)
    assert (
        len({tool_call_id("s", 1, 0), tool_call_id("s", 1, 1), tool_call_id("s", 2, 0), tool_call_id("t", 1, 0)}) == 4
    )
    assert tool_call_id("s", 1, 0).startswith("call_")


def test_normalised_messages():
    (system, user, assistant, tool) = normalize_messages(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "12*"}, {"type": "text", "text": "34?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": '{"expression": "12*34"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "408"},
        ]
    )
    assert system == {"role": "system", "content": "Be brief."}
    assert user == {"role": "user", "content": "12*34?"}
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["arguments"] == {"expression": "12*34"}
    assert tool == {"role": "tool", "content": "408", "tool_call_id": "c1"}


@pytest.mark.parametrize(
    ("message", "param"),
    [
        ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "messages.0.content.0.type"),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]},
            "messages.0.tool_calls.0.function.arguments",
        ),
    ],
)
def test_unusable_messages_name_the_field(message, param):
    with pytest.raises(MessageError) as err:
        normalize_messages([message])
    assert err.value.param == param


def test_assistant_messages_compare_by_content_and_parsed_calls():
    returned = split_reply(CALC, "s", 0).message()
    resent = normalize_messages(
        [
            {
                "role": "assistant",
                "content": "  ",
                "tool_calls": [{"id": "x", "function": {"name": "calculator", "arguments": '{"expression":"12*34"}'}}],
            }
        ]
    )[0]
    assert same_message(resent, returned)
    other = dict(resent, tool_calls=[{"id": "x", "function": {"name": "calculator", "arguments": {"expression": "1"}}}])
    assert not same_message(other, returned)
    assert not same_message({"role": "user", "content": ""}, returned)
    assert same_message({"role": "tool", "content": "408"}, {"role": "tool", "content": "408", "tool_call_id": "c"})

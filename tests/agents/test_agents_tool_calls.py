"""Tool-call parsing in the Hermes / Qwen format: good, malformed, several, unclosed, JSON-string arguments."""

from __future__ import annotations

import json

import pytest

from reasonrl.agents.tool_calls import ToolCall, format_tool_call, parse_tool_calls


def test_one_call_with_newlines_and_text_around():
    text = (
        'Let me compute.\n<tool_call>\n  {"name": "calculator", "arguments": {"expression": "12*34"}}  \n</tool_call>'
    )
    assert parse_tool_calls(text) == ([ToolCall("calculator", {"expression": "12*34"})], [])


def test_no_call():
    assert parse_tool_calls("The answer is 408.") == ([], [])
    assert parse_tool_calls("") == ([], [])


def test_several_calls_in_order():
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> then '
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    calls, errors = parse_tool_calls(text)
    assert [c.name for c in calls] == ["a", "b"] and errors == []


def test_arguments_as_json_string_missing_or_parameters():
    text = '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}</tool_call>'
    assert parse_tool_calls(text)[0] == [ToolCall("calculator", {"expression": "1+1"})]
    assert parse_tool_calls('<tool_call>{"name": "now"}</tool_call>')[0] == [ToolCall("now", {})]
    assert parse_tool_calls('<tool_call>{"name": "f", "parameters": {"a": 2}}</tool_call>')[0] == [
        ToolCall("f", {"a": 2})
    ]


@pytest.mark.parametrize(
    "block, message",
    [
        ('{"name": "calculator", "arguments": {"expression": "1+1"}', "malformed JSON"),
        ("not json at all", "malformed JSON"),
        ('["calculator"]', "must be a JSON object"),
        ('{"arguments": {"x": 1}}', 'needs a "name"'),
        ('{"name": "", "arguments": {}}', 'needs a "name"'),
        ('{"name": 3, "arguments": {}}', 'needs a "name"'),
        ('{"name": "f", "arguments": [1, 2]}', "must be a JSON object, got list"),
        ('{"name": "f", "arguments": "[1, 2]"}', "must be a JSON object, got list"),
        ('{"name": "f", "arguments": "{oops"}', "string that is not a JSON object"),
        ("[" * 100_000, "malformed JSON"),  # nested past the JSON parser's depth: no RecursionError escapes
    ],
)
def test_malformed_blocks_are_errors_not_exceptions(block, message):
    calls, errors = parse_tool_calls(f"<tool_call>{block}</tool_call>")
    assert calls == [] and len(errors) == 1 and message in errors[0]


def test_unclosed_call():
    calls, errors = parse_tool_calls('<tool_call>{"name": "calculator", "arguments": {}}')
    assert calls == [] and len(errors) == 1 and "unclosed <tool_call>" in errors[0]


def test_a_second_open_tag_leaves_the_first_unclosed_and_the_second_parses():
    text = '<tool_call>{"name": "a"<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    calls, errors = parse_tool_calls(text)
    assert calls == [ToolCall("b", {})] and len(errors) == 1 and "unclosed" in errors[0]


def test_good_and_bad_blocks_mixed_and_stray_close_ignored():
    text = '</tool_call><tool_call>{bad}</tool_call><tool_call>{"name": "ok", "arguments": {}}</tool_call>'
    calls, errors = parse_tool_calls(text)
    assert calls == [ToolCall("ok", {})] and len(errors) == 1


def test_error_snippets_are_short():
    _, errors = parse_tool_calls("<tool_call>" + "x" * 10_000 + "</tool_call>")
    assert len(errors[0]) < 300


def test_format_tool_call_is_canonical_and_round_trips():
    text = format_tool_call("calculator", {"expression": "12*34"})
    assert text == '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12*34"}}\n</tool_call>'
    assert parse_tool_calls(text) == ([ToolCall("calculator", {"expression": "12*34"})], [])
    unicode = format_tool_call("echo", {"text": "π ≈ 3.14"})
    assert "π ≈ 3.14" in unicode and json.loads(unicode.split("\n")[1])["arguments"]["text"] == "π ≈ 3.14"

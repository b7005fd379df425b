"""Chat rows with tool use: tool turns, Hermes and OpenAI-style calls, a trailing tool turn as the prompt, the
row's ``env`` / ``tools`` fields, and ``keep_reply`` (the reply turns an SFT on conversations trains on)."""

from __future__ import annotations

import json

import pytest

from reasonrl.data import DataFormatError, get_template, load_rows
from reasonrl.data.chat import prompt_messages, split_messages

CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "4821*937"}}\n</tool_call>'
USER = {"role": "user", "content": "What is 4821 * 937?"}
HERMES = [
    USER,
    {"role": "assistant", "content": CALL},
    {"role": "tool", "content": "4517277"},
    {"role": "assistant", "content": "The answer is \\boxed{4517277}."},
]
OPENAI_CALL = {
    "type": "function",
    "function": {"name": "calculator", "arguments": json.dumps({"expression": "4821*937"})},
}


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from reasonrl.models.tiny import tiny_model_path

    return AutoTokenizer.from_pretrained(tiny_model_path())


def test_a_tool_conversation_splits_at_the_last_user_turn():
    prompt, reply = split_messages(HERMES)
    assert prompt == [USER] and reply == HERMES[1:]
    assert prompt_messages(HERMES) == [USER]


def test_a_trailing_tool_turn_makes_the_whole_conversation_the_prompt(tmp_path, tokenizer):
    convo = HERMES[:3]
    prompt, reply = split_messages(convo)
    assert prompt == convo and reply == []
    (row,) = load_rows(_jsonl(tmp_path / "t.jsonl", [{"messages": convo, "answer": "4517277"}]))
    assert row["messages"] == convo and row["question"] == USER["content"]
    rendered = get_template("chat", tokenizer=tokenizer).render(row)
    # what the rollout appends after the model's <|im_end|>: the tool message, then the next assistant turn's prompt
    assert rendered.endswith(f"{CALL}<|im_end|>\n<|im_start|>tool\n4517277<|im_end|>\n<|im_start|>assistant\n")


def test_openai_style_tool_calls_are_kept_for_the_chat_template():
    convo = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [OPENAI_CALL]},
        {"role": "tool", "content": "4517277", "tool_call_id": "c1", "name": "calculator"},
    ]
    prompt, _ = split_messages(convo)
    assert prompt[1] == {"role": "assistant", "content": "", "tool_calls": [OPENAI_CALL]}
    assert prompt[2] == {"role": "tool", "content": "4517277", "name": "calculator", "tool_call_id": "c1"}
    object_args = [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "1+1"}}}]
    assert split_messages([USER, {"role": "assistant", "tool_calls": object_args}])[1][0]["tool_calls"] == object_args


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "tool", "content": "1"}, USER], r"messages\[0\] is a tool turn without an assistant turn"),
        (
            [{"role": "system", "content": "s"}, USER, {"role": "tool", "content": "1"}],
            r"messages\[2\] is a tool turn without an assistant turn",
        ),
        ([USER, {"role": "assistant", "content": "a"}, {"role": "system", "content": "s"}], r"messages\[2\] has role"),
        ([USER, {"role": "user", "content": "q", "tool_calls": [OPENAI_CALL]}], r"messages\[1\] has tool_calls but"),
        ([USER, {"role": "assistant", "content": None}], r"messages\[1\] content must be a string"),
        ([USER, {"role": "assistant", "tool_calls": []}], r"messages\[1\] tool_calls must be a non-empty list"),
        (
            [USER, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": {}}}]}],
            r"messages\[1\] tool_calls\[0\]\.function\.name",
        ),
        (
            [USER, {"role": "assistant", "tool_calls": [{"function": {"name": "c", "arguments": "[1]"}}]}],
            r"messages\[1\] tool_calls\[0\]\.function\.arguments is a string that is not a JSON object",
        ),
        ([USER, {"role": "assistant", "content": "a"}, {"role": "tool", "content": 5}], r"messages\[2\] content"),
    ],
)
def test_malformed_tool_conversations_name_the_turn(tmp_path, messages, problem):
    with pytest.raises(ValueError, match=problem):
        split_messages(messages)
    path = _jsonl(tmp_path / "bad.jsonl", [{"messages": HERMES, "answer": "1"}, {"messages": messages, "answer": "1"}])
    with pytest.raises(DataFormatError, match=rf"bad\.jsonl:2: question \('messages'\): {problem}"):
        load_rows(path)


def test_env_and_tools_fields_are_checked_and_kept(tmp_path):
    good = {"question": "What is 2 * 3?", "answer": "6", "env": "tools", "tools": ["calculator"]}
    (row,) = load_rows(_jsonl(tmp_path / "ok.jsonl", [good]))
    assert row["env"] == "tools" and row["tools"] == ["calculator"]
    for bad, problem in (
        ({"env": 3}, "env must be a string"),
        ({"tools": "calculator"}, r"tools must be a list of tool names \(strings\), got str"),
        ({"tools": ["calculator", 1]}, "tools must be a list of tool names.*non-strings"),
    ):
        path = _jsonl(tmp_path / "bad.jsonl", [good, {**good, "id": "q7", **bad}])
        with pytest.raises(DataFormatError, match=rf"bad\.jsonl:2: row 1 \(id 'q7'\): {problem}"):
            load_rows(path)
        assert len(load_rows(path, on_error="skip")) == 1


def test_keep_reply_keeps_the_turns_after_the_prompt(tmp_path):
    path = _jsonl(tmp_path / "c.jsonl", [{"messages": HERMES, "answer": "4517277"}, {"messages": HERMES[:2]}])
    with pytest.raises(DataFormatError, match="no answer field"):
        load_rows(path)  # an RL row needs its gold answer
    first, second = load_rows(path, keep_reply=True).rows
    assert first["messages"] == [USER] and first["reply_messages"] == HERMES[1:] and first["answer"] == "4517277"
    assert second["reply_messages"] == HERMES[1:2] and second["answer"] == ""
    assert "reply_messages" not in load_rows(path, on_error="skip").rows[0]

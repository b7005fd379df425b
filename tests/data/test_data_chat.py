"""Chat datasets: rows whose prompt is a ``messages`` list (system + user turns, maybe a final assistant reply) load
as chat rows and render through the tokenizer's chat template (the tiny model's Qwen2 template)."""

from __future__ import annotations

import json

import pytest

from reasonrl.data import DataFormatError, TemplateRenderError, get_template, load_rows

SYSTEM = "You are a careful math tutor."


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _chat_record(i: int, **extra) -> dict:
    return {
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"What is {i} + 3?"},
            {"role": "assistant", "content": f"The sum is \\boxed{{{i + 3}}}."},  # a reference reply: not prompt
        ],
        "answer": str(i + 3),
        **extra,
    }


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from reasonrl.models.tiny import tiny_model_path

    tok = AutoTokenizer.from_pretrained(tiny_model_path())
    assert tok.chat_template, "the tiny model's tokenizer has a chat template"
    return tok


def test_messages_rows_load_as_chat_rows(tmp_path):
    path = _jsonl(tmp_path / "chat.jsonl", [_chat_record(1, level=2), _chat_record(2)])
    rows = load_rows(path)
    assert [r["question"] for r in rows] == ["What is 1 + 3?", "What is 2 + 3?"]  # the last user turn
    assert rows[0]["messages"] == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is 1 + 3?"}]
    assert [r["answer"] for r in rows] == ["4", "5"] and rows[0]["level"] == 2
    mapped = load_rows(path, fields={"question": "messages", "answer": "answer"})
    assert mapped.rows == rows.rows


def test_a_text_question_wins_and_raw_messages_are_left_out(tmp_path):
    path = _jsonl(tmp_path / "both.jsonl", [_chat_record(1, problem="1 + 3 = ?")])
    (row,) = load_rows(path)
    assert row["question"] == "1 + 3 = ?" and "messages" not in row


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        (
            [{"from": "human", "value": "hi"}],
            r"\[0\] is not a \{role, content\} turn \(it has \['from', 'value'\]\)",
        ),
        ([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}], "no user turn"),
        ([], "non-empty list"),
        (
            [{"role": "user", "content": "q"}, {"role": "tool", "content": "x"}],
            r"\[1\] is a tool turn without an assistant turn before it",
        ),
        ([{"role": "user", "content": "q"}, {"role": "function", "content": "x"}], "role 'function'"),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "user", "content": ""}],
            r"\[2\] \(the last user turn\) is empty",
        ),
        ([{"role": "user", "content": ["q"]}], "content must be a string"),
    ],
)
def test_bad_messages_name_the_file_and_line(tmp_path, messages, problem):
    path = _jsonl(tmp_path / "bad.jsonl", [_chat_record(1), {"messages": messages, "answer": "1"}])
    with pytest.raises(DataFormatError, match=rf"bad\.jsonl:2: question \('messages'\): messages.*{problem}"):
        load_rows(path)
    assert len(load_rows(path, on_error="skip")) == 1


def test_chat_template_renders_the_system_and_user_turns(tmp_path, tokenizer):
    (row,) = load_rows(_jsonl(tmp_path / "chat.jsonl", [_chat_record(7)]))
    prompt = get_template("chat", tokenizer=tokenizer).render(row)
    expected = tokenizer.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True)
    assert prompt == expected
    assert SYSTEM in prompt and "What is 7 + 3?" in prompt
    assert prompt.index(SYSTEM) < prompt.index("What is 7 + 3?")
    assert "boxed{10}" not in prompt  # the reference reply is not part of the prompt
    assert "step by step" not in prompt  # a chat row is rendered as given: no instruction added
    assert prompt.endswith("<|im_start|>assistant\n")  # the generation prompt
    with_default_system = get_template("chat", tokenizer=tokenizer, system_prompt="DEFAULT SYSTEM").render(row)
    assert "DEFAULT SYSTEM" not in with_default_system  # the row's own system turn wins
    user_only = {"id": "u", "question": "q", "messages": [{"role": "user", "content": "Just q"}]}
    rendered = get_template("chat", tokenizer=tokenizer, system_prompt="DEFAULT SYSTEM").render(user_only)
    assert rendered.index("DEFAULT SYSTEM") < rendered.index("Just q")


def test_a_bad_messages_value_at_render_time_names_the_row(tokenizer):
    template = get_template("chat", tokenizer=tokenizer)
    with pytest.raises(DataFormatError, match=r"row 'r7': messages has no user turn"):
        template.render({"id": "r7", "question": "q", "messages": [{"role": "system", "content": "s"}]})
    with pytest.raises(DataFormatError, match=r"row 'r8': messages must be a non-empty list"):
        template.render({"id": "r8", "question": "q", "messages": {"role": "user", "content": "q"}})


def test_text_templates_render_a_chat_row_only_when_nothing_is_lost(tmp_path):
    user_only = {"id": "u", "question": "What is 1?", "messages": [{"role": "user", "content": "What is 1?"}]}
    assert get_template("plain").render(user_only) == "What is 1?"
    assert get_template("orz").render(user_only).endswith("What is 1?\nAssistant: <think>")
    (row,) = load_rows(_jsonl(tmp_path / "chat.jsonl", [_chat_record(1)]))
    with pytest.raises(TemplateRenderError, match=r"row 'chat-0' is a chat prompt with system, user turns.*chat"):
        get_template("orz").render(row)
    user_file = tmp_path / "t.jinja"
    user_file.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    assert get_template(str(user_file)).render(row) == f"[system] {SYSTEM}\n[user] What is 1 + 3?\n"


def test_sft_rows_of_a_chat_dataset_keep_their_turns(tmp_path, tokenizer):
    from reasonrl.sft.config import SFTConfig
    from reasonrl.sft.data import _load, encode_pairs

    path = _jsonl(tmp_path / "chat.jsonl", [_chat_record(1)])
    cfg = SFTConfig(pretrain="tiny", prompt_field="messages", response_field="answer")
    (row,) = _load([str(path)], cfg)
    assert row["messages"][0] == {"role": "system", "content": SYSTEM}
    template = get_template("chat", tokenizer=tokenizer)
    [(prompt_ids, _)], dropped = encode_pairs([row], tokenizer, template, max_prompt_len=512)
    assert dropped == 0 and SYSTEM in tokenizer.decode(prompt_ids)

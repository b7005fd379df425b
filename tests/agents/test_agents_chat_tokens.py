"""Tool-message tokens from the chat template, and the re-render check mode."""

from __future__ import annotations

import copy

import pytest

from reasonrl.agents.chat_tokens import ChatTemplateError, ToolMessageTokens, retokenize_difference


def test_chatml_tool_message_pieces(tiny_tokenizer):
    tool = ToolMessageTokens.from_tokenizer(tiny_tokenizer)
    assert (
        tool.observation_text("42", turn_ended_with_eos=True)
        == "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tool.observation_text("42", turn_ended_with_eos=False).startswith("<|im_end|>\n<|im_start|>tool\n")


def test_a_conversation_built_token_by_token_equals_its_rerender(tiny_tokenizer):
    tool = ToolMessageTokens.from_tokenizer(tiny_tokenizer)
    eos = tool.eos_id
    first = tiny_tokenizer("call the tool", add_special_tokens=False).input_ids + [eos]
    last = tiny_tokenizer("the answer is 7", add_special_tokens=False).input_ids + [eos]
    obs = tool.observation_ids(tiny_tokenizer, "7", turn_ended_with_eos=True)
    turns = [
        {"role": "assistant", "token_ids": first},
        {"role": "tool", "text": "7"},
        {"role": "assistant", "token_ids": last},
    ]
    assert retokenize_difference(tiny_tokenizer, first + obs + last, turns, eos) is None
    dropped = first + obs[1:] + last  # the turn separator after <|im_end|> lost: reported where it went missing
    position, ours, rendered = retokenize_difference(tiny_tokenizer, dropped, turns, eos)
    assert position == len(first) and ours != rendered


def test_templates_that_cannot_frame_tool_messages_are_refused(tiny_tokenizer):
    no_template = copy.deepcopy(tiny_tokenizer)
    no_template.chat_template = None
    with pytest.raises(ChatTemplateError, match="no chat_template"):
        ToolMessageTokens.from_tokenizer(no_template)
    no_tool_role = copy.deepcopy(tiny_tokenizer)
    no_tool_role.chat_template = (
        "{% for m in messages %}{% if m.role != 'tool' %}{{ m.content }}<|im_end|>{% endif %}{% endfor %}"
    )
    with pytest.raises(ChatTemplateError, match="content of a 'tool' message"):
        ToolMessageTokens.from_tokenizer(no_tool_role)


def test_environment_problems_before_start_up(tiny_tokenizer, tmp_path):
    from reasonrl.loop.multi_turn import environment_problems

    assert environment_problems("tools", ["calculator"], tiny_tokenizer) == []
    (unknown,) = environment_problems("tools", ["abacus"], tiny_tokenizer)
    assert "abacus" in unknown
    bad = tmp_path / "env.py"
    bad.write_text("class E:\n    def reset(self, row):\n        pass\n")
    assert any("step" in p for p in environment_problems(f"{bad}:E", [], tiny_tokenizer))

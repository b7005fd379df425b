"""Prompt templates: ORZ R1-Zero style, the tokenizer's chat template, sandboxed user jinja files."""

from __future__ import annotations

import copy

import pytest

from reasonrl.data import ORZ_STOP, TemplateRenderError, get_template, orz_template, render_prompts

ROW = {"id": "r1", "question": "What is 2+3?", "answer": "5", "source": "toy", "level": 2}

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="<|im_end|>")
    fast.chat_template = CHATML
    return fast


def test_orz_template():
    text = get_template("orz").render(ROW)
    assert text.startswith("A conversation between User and Assistant.")
    assert "<think> </think>" in text and "<answer> </answer>" in text and "\\boxed{}" in text
    assert "This is the problem:\nWhat is 2+3?\nAssistant: <think>" in text
    assert text.endswith("Assistant: <think>")
    assert "5" not in text.replace("2+3", "")  # the gold answer never leaks into the prompt
    assert orz_template(bos_token="<s>").render(ROW).startswith("<s>A conversation")
    assert get_template("r1_zero").render(ROW) == text
    assert "</answer>" in ORZ_STOP


def test_plain_and_render_prompts():
    assert render_prompts([ROW, {**ROW, "question": "Q2"}], get_template("plain")) == ["What is 2+3?", "Q2"]


def test_user_jinja_file(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(
        "[{{ source }} L{{ level }}] {{ question | trim }}{% if answer is defined %} ({{ answer }}){% endif %}"
    )
    assert get_template(str(path)).render(ROW) == "[toy L2] What is 2+3?"
    assert get_template(str(path), expose_answer=True).render(ROW) == "[toy L2] What is 2+3? (5)"


def test_missing_variable_is_a_clear_error(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("{{ question }} in {{ topic }}")
    with pytest.raises(TemplateRenderError, match=r"t\.jinja: 'topic' is undefined \(row 'r1'\)"):
        get_template(str(path)).render(ROW)


def test_syntax_error_and_missing_file(tmp_path):
    path = tmp_path / "bad.jinja"
    path.write_text("{% if question %}unclosed")
    with pytest.raises(TemplateRenderError, match="syntax error"):
        get_template(str(path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_template(str(tmp_path / "none.jinja"))
    with pytest.raises(ValueError, match="unknown template"):
        get_template("nonsense")
    with pytest.raises(TemplateRenderError, match="no 'question'"):
        get_template("plain").render({"id": "x"})


def test_sandbox_blocks_python_internals(tmp_path):
    path = tmp_path / "evil.jinja"
    path.write_text("{{ question.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateRenderError):
        get_template(str(path)).render(ROW)


def test_chat_template(tokenizer):
    text = get_template("chat", tokenizer=tokenizer).render(ROW)
    assert text.startswith("<|im_start|>user\nWhat is 2+3?\nPlease reason step by step")
    assert text.endswith("<|im_start|>assistant\n")
    with_system = get_template("chat", tokenizer=tokenizer, system_prompt="Be brief.").render(ROW)
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    custom = get_template("chat", tokenizer=tokenizer, instruction="Solve: {{ question }}").render(ROW)
    assert "<|im_start|>user\nSolve: What is 2+3?<|im_end|>" in custom


def test_chat_template_errors(tokenizer):
    with pytest.raises(ValueError, match="needs a tokenizer"):
        get_template("chat")

    class NoTemplate:
        chat_template = None

    with pytest.raises(TemplateRenderError, match="no chat_template"):
        get_template("chat", tokenizer=NoTemplate())


def test_chat_template_passes_the_rows_tool_schemas(tiny_tokenizer):
    """Multi-turn tools: the schemas of the row's tools (all configured ones without a ``tools`` field) reach the
    chat template, which shows them (Qwen's lists them in the system turn); ChatML ignores them."""
    from reasonrl.agents.tools import resolve_tools

    schemas = {name: tool.schema for name, tool in resolve_tools(["calculator", "python"]).items()}
    plain = get_template("chat", tokenizer=tiny_tokenizer, tool_schemas=schemas).render({"question": "2+2?"})
    assert "calculator" not in plain  # the tiny model's ChatML template has no tools section
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = (
        "{% if tools %}TOOLS:{% for t in tools %} {{ t.function.name }}{% endfor %}|{% endif %}"
        + tiny_tokenizer.chat_template
    )
    template = get_template("chat", tokenizer=tokenizer, tool_schemas=schemas)
    assert template.render({"question": "2+2?"}).startswith("TOOLS: calculator python|")
    assert template.render({"question": "2+2?", "tools": ["calculator"]}).startswith("TOOLS: calculator|")
    assert template.render({"question": "2+2?", "tools": []}).startswith("<|im_start|>user")

"""Tools: the registry, user functions (schema from get_json_schema), resolve_tools errors, call_tool never raising."""

from __future__ import annotations

import json
import textwrap

import pytest

from reasonrl.agents.tool_calls import ToolCall, ToolError
from reasonrl.agents.tools import (
    BUILTIN_TOOLS,
    Tool,
    ToolSpecError,
    call_tool,
    load_user_tool,
    resolve_tools,
    tool_from_function,
)

USER_TOOLS = '''
def lookup(city: str, unit: str = "C") -> str:
    """Look up the temperature of a city.

    Args:
        city: the city's name
        unit: C or F
    """
    return f"{city}: 21 {unit}"


def no_docstring(x: int) -> int:
    return x
'''


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(textwrap.dedent(USER_TOOLS))
    return path


def test_builtin_schemas_are_the_function_format():
    tools = resolve_tools(["calculator", "python"])
    assert list(tools) == ["calculator", "python"] == sorted(BUILTIN_TOOLS)
    for name, tool in tools.items():
        assert tool.schema["type"] == "function" and tool.schema["function"]["name"] == name
        assert tool.schema["function"]["parameters"]["required"] == tool.required


def test_user_tool_from_a_file_with_schema_from_its_docstring(user_file):
    tool = load_user_tool(f"{user_file}:lookup")
    params = tool.schema["function"]["parameters"]
    assert tool.name == "lookup" and tool.spec == f"{user_file}:lookup"
    assert params["properties"]["city"] == {"type": "string", "description": "the city's name"}
    assert params["required"] == ["city"]
    assert "temperature" in tool.schema["function"]["description"]
    assert call_tool({"lookup": tool}, ToolCall("lookup", {"city": "Paris"})) == ("Paris: 21 C", False)


def test_relative_user_spec_from_base_dir(user_file):
    tools = resolve_tools(["calculator", "my_tools.py:lookup"], base_dir=user_file.parent)
    assert list(tools) == ["calculator", "lookup"]


def test_user_tool_without_docstring_is_refused_with_what_to_do(user_file):
    with pytest.raises(ToolSpecError, match="Google-style docstring"):
        load_user_tool(f"{user_file}:no_docstring")


def test_tool_from_function_with_an_explicit_schema():
    schema = {"name": "add", "description": "add", "parameters": {"type": "object", "properties": {}}}
    tool = tool_from_function(lambda a, b: a + b, schema)
    assert tool.name == "add" and tool.schema["type"] == "function"
    assert call_tool({"add": tool}, ToolCall("add", {"a": 1, "b": 2})) == ("3", False)


@pytest.mark.parametrize(
    "names, message",
    [
        (["calc"], r"unknown tool 'calc': the built-in tools are \['calculator', 'python'\]"),
        (["missing_file.py:f"], "tool spec 'missing_file.py:f': file .* does not exist"),
        (["calculator", "calculator"], "two tools are named 'calculator'"),
        ([""], "non-empty strings"),
    ],
)
def test_resolve_errors(names, message):
    with pytest.raises(ToolSpecError, match=message):
        resolve_tools(names)


def _error(result):
    text, error = result
    assert error is True
    return json.loads(text)["error"]


def _tools(**functions):
    return {
        name: tool_from_function(fn, {"name": name, "parameters": {"required": ["x"]}})
        for name, fn in functions.items()
    }


def raises(x):
    raise KeyError("boom")


def refuses(x):
    raise ToolError("x must be positive")


def test_call_tool_errors_never_raise():
    tools = resolve_tools(["calculator"]) | _tools(
        raises=raises, refuses=refuses, obj=lambda x: object(), nan=lambda x: float("nan"), exits=lambda x: exit(3)
    )
    assert "unknown tool 'nope'; available tools: calculator" in _error(call_tool(tools, ToolCall("nope", {})))
    assert "missing its required argument(s) ['expression']" in _error(call_tool(tools, ToolCall("calculator", {})))
    assert "bad arguments" in _error(call_tool(tools, ToolCall("calculator", {"expression": "1", "y": 2})))
    assert _error(call_tool(tools, ToolCall("calculator", {"expression": "1/0"}))) == "division by zero"
    assert _error(call_tool(tools, ToolCall("raises", {"x": 1}))) == "tool 'raises' raised KeyError: 'boom'"
    assert _error(call_tool(tools, ToolCall("refuses", {"x": 1}))) == "x must be positive"
    assert "not text or JSON" in _error(call_tool(tools, ToolCall("obj", {"x": 1})))
    assert "not text or JSON" in _error(call_tool(tools, ToolCall("nan", {"x": 1})))
    assert "SystemExit" in _error(call_tool(tools, ToolCall("exits", {"x": 1})))


def test_call_tool_results_json_and_cut():
    tools = _tools(js=lambda x: {"v": [x, None]}, big=lambda x: "a" * 3000 + "b" * 3000)
    assert call_tool(tools, ToolCall("js", {"x": 1})) == ('{"v": [1, null]}', False)
    text, error = call_tool(tools, ToolCall("big", {"x": 1}), max_chars=100)
    assert not error and text.startswith("a" * 50) and text.endswith("b" * 50) and "5900 characters cut" in text
    assert isinstance(next(iter(tools.values())), Tool)

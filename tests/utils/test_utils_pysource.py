"""What a Python file defines, read with ast: the listing names its classes and functions, a missing name is told
only when no dynamic binding could supply it, and a class's attributes only when nothing outside the file can add
any."""

from __future__ import annotations

import ast
import textwrap

import pytest

from reasonrl.utils.pysource import module_source, parse_definitions, read_definitions

THREE_CLASSES = """
from dataclasses import dataclass

from reasonrl.agents.environment import StepResult


class Guess:
    def reset(self, row):
        return None

    def step(self, model_turn):
        return StepResult(done=True)


class NoStep:
    def reset(self, row):
        return None


@dataclass
class Words(Guess):
    size: int = 3


LIMIT = 4
"""


def _defs(source: str):
    return parse_definitions(ast.parse(textwrap.dedent(source)))


def test_a_file_of_three_classes_lists_them(tmp_path):
    path = tmp_path / "envs.py"
    path.write_text(THREE_CLASSES)
    defs = read_definitions(path)
    assert defs.listing() == ["Guess", "NoStep", "Words"]  # not the imported StepResult / dataclass, not LIMIT
    assert defs.defines("Words") and defs.defines("LIMIT") and defs.defines("StepResult")
    assert defs.defines("Nope") is False


def test_class_attributes_follow_bases_in_the_file():
    defs = _defs(THREE_CLASSES)
    assert {"reset", "step"} <= defs.class_attributes("Words")  # inherited from Guess; @dataclass adds none
    assert "step" not in defs.class_attributes("NoStep")


@pytest.mark.parametrize(
    "source",
    [
        "from base import Env\nclass E(Env):\n    pass\n",  # a base from elsewhere
        "def deco(c):\n    return c\n@deco\nclass E:\n    pass\n",  # a decorator that may add methods
        "class E(metaclass=type):\n    pass\n",
        "class E:\n    pass\nE.step = print\n",  # assigned from outside the class
        "class E:\n    pass\nsetattr(E, 'step', print)\n",
        "class E:\n    locals()['step'] = print\n",
        "class B:\n    def __init_subclass__(cls):\n        cls.step = print\nclass E(B):\n    pass\n",
        "class E:\n    pass\nE = object\n",  # rebound: which binding wins is not told
    ],
)
def test_attributes_are_unknown_when_something_else_can_add_them(source):
    assert _defs(source).class_attributes("E") is None


@pytest.mark.parametrize(
    "source",
    [
        "from helpers import *\n",
        "globals()['Env'] = type('Env', (), {})\n",
        "def __getattr__(name):\n    return name\n",
        "import sys\nsys.modules[__name__] = object()\n",
    ],
)
def test_a_missing_name_is_not_told_when_names_are_bound_dynamically(source):
    assert _defs(source).defines("Env") is None


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    from fast import Env\nexcept ImportError:\n    Env = None\n",
        "if True:\n    class Env:\n        pass\n",
        "def make():\n    global Env\n    Env = 1\nmake()\n",
        "for Env in range(3):\n    pass\n",
        "import pkg.Env as Env\n",
        "with open(__file__) as Env:\n    pass\n",
    ],
)
def test_every_kind_of_top_level_binding_counts(source):
    assert _defs(source).defines("Env") is True


def test_what_runs_only_inside_methods_does_not_blind_the_checks():
    """eval / vars / setattr(self, ...) inside a method bind no module name and add no class attribute."""
    source = """
class Calc:
    def reset(self, row):
        setattr(self, "row", row)
        return str(vars(self))

    def step(self, model_turn):
        return eval(model_turn)
"""
    defs = _defs(source)
    assert defs.defines("Nope") is False
    assert {"reset", "step"} <= defs.class_attributes("Calc")


def test_syntax_errors_raise_as_importing_would(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def oops(:\n")
    with pytest.raises(SyntaxError):
        read_definitions(path)


def test_module_source_without_importing():
    found, path = module_source("reasonrl.agents.tool_env")
    assert found and path is not None and path.name == "tool_env.py"
    assert module_source("reasonrl_no_such_module.envs") == (False, None)
    assert module_source("reasonrl.no_such_sub") == (True, None)  # the package is there, the submodule is not told

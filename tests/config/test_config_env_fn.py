"""``env_fn`` checked by ``validate()`` without importing the user's file (it is read with ast): a missing file or
module, a file that does not compile, a name the file does not define (the message lists what it defines) and a
class of the file without ``reset`` / ``step`` are refused naming ``env_fn``; what only the import can tell is left to
``reasonrl.agents.loading.env_fn_problems`` (before Ray starts)."""

from __future__ import annotations

import textwrap

import pytest

from reasonrl.config import BasePPOExpConfig, ConfigError
from reasonrl.config.probes import _env_fn_problems

ENVS = """
import os

from reasonrl.agents.environment import Environment, StepResult


class Guess:
    def reset(self, row):
        return None

    def step(self, model_turn):
        return StepResult(done=True)


class NoStep:
    def reset(self, row):
        return None


class Words(Guess):
    pass


class Typed(Environment):  # reset / step may come from the base: told by the import
    pass


def make_env():
    return Guess()


RUN_AT_IMPORT = os.environ["NEVER_SET_BY_THE_TESTS"]  # importing this file would fail: validate() never runs it
"""


@pytest.fixture
def envs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "envs.py").write_text(textwrap.dedent(ENVS))
    (tmp_path / "broken.py").write_text("class Env(:\n    pass\n")
    (tmp_path / "envs.txt").write_text("class Env: pass\n")
    return tmp_path


@pytest.mark.parametrize("spec", ["envs.py:Guess", "envs.py:Words", "envs.py:Typed", "envs.py:make_env", "tools"])
def test_what_the_file_defines_passes(envs, spec):
    assert _env_fn_problems(spec) == []


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nosuch.py:Env", "file 'nosuch.py' does not exist (current directory"),
        ("./envs.txt:Env", "is not a .py file"),
        ("broken.py:Env", "does not compile (SyntaxError: "),
        ("envs.py:Gues", "defines no 'Gues'; did you mean 'Guess'? classes and functions defined there: "),
        ("envs.py:NoStep", "the class NoStep has no callable step; an environment needs reset(self, row)"),
        ("envs.py:Guess-1", "is not a Python name"),
        ("envs.py", "is not a spec"),
        ("reasonrl_no_such_module.envs:Env", "module 'reasonrl_no_such_module' is not importable from here"),
        ("reasonrl.agents.tool_env:NoSuchEnv", "module 'reasonrl.agents.tool_env' ("),
    ],
)
def test_refusals_name_env_fn(envs, spec, message):
    (problem,) = _env_fn_problems(spec)
    assert problem.startswith(f"env_fn={spec!r}"), problem
    assert message in problem, problem


def test_the_listing_names_the_classes_and_functions_of_the_file(envs):
    (problem,) = _env_fn_problems("envs.py:Nope")
    assert "['Guess', 'NoStep', 'Typed', 'Words', 'make_env']" in problem, problem  # not os, Environment, StepResult


def test_module_specs_are_read_without_importing():
    assert _env_fn_problems("reasonrl.agents.tool_env:ToolEnvironment") == []


def test_validate_refuses_a_class_without_step(envs):
    cfg = BasePPOExpConfig(pretrain="tiny", device="cpu", env_fn="envs.py:NoStep")
    with pytest.raises(ConfigError, match=r"env_fn='envs.py:NoStep': the class NoStep has no callable step"):
        cfg.validate()

"""tools/uv_pip.py: the machine's pip configuration (``pip config list``) translated into uv's flags and environment,
with pip's precedence (global < the command's section < ``PIP_*``), and the uv / pip command lines the Makefile runs.
Nothing is installed and uv never runs; one test runs this interpreter's ``pip config list``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_uv_pip():
    spec = importlib.util.spec_from_file_location("uv_pip", REPO / "tools" / "uv_pip.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


uv_pip = load_uv_pip()

# `pip config list` of a machine shaped like the project's: PIP_* variables and a global pip.conf (made-up paths).
CONFIG_LIST = """\
:env:.cert='/srv/ca/bundle.pem'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/srv/wheels'
global.cert='/srv/ca/bundle.pem'
global.constraint='/srv/pip/caps.txt'
global.extra-index-url='file:///srv/index-a/simple file:///srv/index-b/simple'
global.find-links='/srv/wheels'
"""


def flag_values(flags: list[str], name: str) -> list[str]:
    return [flags[i + 1] for i, flag in enumerate(flags) if flag == name]


def test_parse_config_list_reads_sections_keys_and_quoted_values():
    items = uv_pip.parse_config_list(CONFIG_LIST + "some warning line\n\n")
    assert (":env:", "find-links", "/srv/wheels") in items
    assert ("global", "extra-index-url", "file:///srv/index-a/simple file:///srv/index-b/simple") in items
    assert len(items) == 8
    # pip prints values with repr(): quotes inside a value survive; keys are normalised.
    (item,) = uv_pip.parse_config_list("""install.Index_URL='https://example.org/it\\'s/simple'""")
    assert item == ("install", "index-url", "https://example.org/it's/simple")


def test_a_machines_pip_config_becomes_these_uv_flags():
    settings = uv_pip.effective_settings(uv_pip.parse_config_list(CONFIG_LIST))
    flags, env, ignored = uv_pip.uv_options(settings, environ={})
    assert flag_values(flags, "--index-strategy") == ["unsafe-best-match"]  # pip's "best version over all indexes"
    assert flag_values(flags, "--find-links") == ["/srv/wheels"]  # where the CPU torch wheel lies
    assert flag_values(flags, "--extra-index-url") == ["file:///srv/index-a/simple", "file:///srv/index-b/simple"]
    assert flag_values(flags, "--constraint") == ["/srv/pip/caps.txt"]
    assert "--index-url" not in flags  # none configured: uv's default, PyPI, as pip's
    assert env == {"SSL_CERT_FILE": "/srv/ca/bundle.pem", "UV_HTTP_TIMEOUT": "180"}
    assert ignored == []


def test_precedence_is_pips_global_then_command_section_then_environment():
    items = [
        ("global", "index-url", "https://global/simple"),
        ("install", "index-url", "https://install/simple"),
        ("download", "index-url", "https://download/simple"),  # another command's section: not install's
        ("global", "find-links", "/global/wheels"),
        (":env:", "find-links", "/env/a /env/b"),
        ("global", "constraint", "/global/c.txt"),
    ]
    settings = uv_pip.effective_settings(items)
    assert settings == {
        "index-url": "https://install/simple",
        "find-links": "/env/a /env/b",
        "constraint": "/global/c.txt",
    }
    assert uv_pip.effective_settings(items, command="download")["index-url"] == "https://download/simple"
    flags, _, _ = uv_pip.uv_options(settings, environ={})
    assert flag_values(flags, "--index-url") == ["https://install/simple"]
    assert flag_values(flags, "--find-links") == ["/env/a", "/env/b"]  # the environment replaces, never appends


def test_switches_env_vars_and_untranslated_settings():
    settings = {
        "no-index": "true",
        "pre": "0",
        "no-cache-dir": "1",
        "trusted-host": "a.example b.example",
        "only-binary": ":all:",
        "proxy": "http://proxy:3128",
        "cert": "/my/ca.pem",
        "progress-bar": "off",  # output only: silently ignored
        "prefer-binary": "1",  # no uv translation: named
    }
    flags, env, ignored = uv_pip.uv_options(settings, environ={"SSL_CERT_FILE": "/user/choice.pem"})
    assert "--no-index" in flags and "--no-cache" in flags
    assert "--prerelease" not in flags  # pre=0 is off
    assert flag_values(flags, "--allow-insecure-host") == ["a.example", "b.example"]
    assert flag_values(flags, "--only-binary") == [":all:"]
    assert env == {"HTTP_PROXY": "http://proxy:3128", "HTTPS_PROXY": "http://proxy:3128"}  # SSL_CERT_FILE: the user's
    assert ignored == ["prefer-binary"]


def test_uv_command_lines(capsys):
    settings = {"find-links": "/w", "prefer-binary": "1"}
    cmd, env = uv_pip.uv_command("/v/bin/uv", "install", ["-q", "-c", "c.txt", "-e", ".[cpu]"], settings, "/v/bin/py")
    assert cmd[:5] == ["/v/bin/uv", "pip", "install", "--python", "/v/bin/py"]
    assert cmd[-5:] == ["-q", "-c", "c.txt", "-e", ".[cpu]"]  # the Makefile's own arguments come last, unchanged
    assert flag_values(cmd, "--find-links") == ["/w"] and env == {}
    assert "'prefer-binary'" in capsys.readouterr().err
    cmd, env = uv_pip.uv_command("uv", "uninstall", ["-q", "-y", "torchvision"], settings, "py")
    assert cmd == ["uv", "pip", "uninstall", "--python", "py", "-q", "torchvision"]  # no -y, no index flags
    assert env == {}


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pip_runs_when_asked_or_when_uv_is_missing(monkeypatch, installer):
    calls = []
    monkeypatch.setattr(uv_pip, "find_uv", lambda: None)
    monkeypatch.setattr(uv_pip.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
    assert uv_pip.main(["--installer", installer, "install", "-q", "-U", "pip"]) == 0
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "-U", "pip"]]


def test_an_install_uv_fails_is_run_again_by_pip(monkeypatch, capsys):
    """A machine whose pip configuration uv reads otherwise (an index layout, a setting it lacks) still installs: pip
    runs the same command, as before uv. An uninstall is not repeated."""
    calls = []
    monkeypatch.setattr(uv_pip, "find_uv", lambda: "/v/bin/uv")
    monkeypatch.setattr(uv_pip, "pip_settings", dict)
    monkeypatch.setattr(uv_pip.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or (2 if "uv" in cmd[0] else 0))
    assert uv_pip.main(["install", "-q", "-e", ".[cpu]"]) == 0
    assert calls[0][:3] == ["/v/bin/uv", "pip", "install"]
    assert calls[1] == [sys.executable, "-m", "pip", "install", "-q", "-e", ".[cpu]"]
    assert "uv exited 2; pip runs the same install" in capsys.readouterr().err
    calls.clear()
    assert uv_pip.main(["uninstall", "-q", "-y", "torchvision"]) == 2
    assert len(calls) == 1


def test_usage_errors_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(uv_pip.subprocess, "call", lambda cmd, **kw: pytest.fail(f"ran {cmd}"))
    for argv in (["--installer", "conda", "install", "x"], ["--installer"], ["freeze"], []):
        assert uv_pip.main(argv) == 2
    assert capsys.readouterr().err.count("usage:") == 4


def test_pip_arguments_are_never_taken_for_the_scripts_own(monkeypatch):
    calls = []
    monkeypatch.setattr(uv_pip.subprocess, "call", lambda cmd, **kw: calls.append(cmd) or 0)
    assert uv_pip.main(["--installer=pip", "install", "-h", "--installer", "x"]) == 0
    assert calls == [[sys.executable, "-m", "pip", "install", "-h", "--installer", "x"]]


def test_real_pip_config_list_is_read(monkeypatch):
    """This interpreter's pip (``pip config list``, ~1 s, installs nothing), with no config file and two PIP_*
    variables: the output format the parser relies on."""
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip then reads no pip.conf at all
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/w1 /srv/w2")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///srv/index-a/simple")
    settings = uv_pip.pip_settings()
    assert settings["find-links"] == "/srv/w1 /srv/w2"
    assert settings["extra-index-url"] == "file:///srv/index-a/simple"
    flags, _, _ = uv_pip.uv_options(settings, environ={})
    assert flag_values(flags, "--find-links") == ["/srv/w1", "/srv/w2"]


def test_compile_writes_the_bytecode_of_every_module_and_skips_one_that_does_not_compile(tmp_path):
    """``compile`` (the Makefile's last install step): a .pyc beside each module, in its __pycache__, whatever
    PYTHONDONTWRITEBYTECODE says; a file this Python cannot compile (torch ships one for 3.12) is skipped quietly."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "mod.py").write_text("def f():\n    return 2\n")
    (tmp_path / "pkg" / "newer.py").write_text("def f[T](a):\n    return a\n" if sys.version_info < (3, 12) else "(\n")
    uv_pip.compile_dirs([str(tmp_path)])
    for name in ("__init__", "mod"):
        assert Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / f"{name}.py"))).is_file(), name
    assert not Path(importlib.util.cache_from_source(str(tmp_path / "pkg" / "newer.py"))).exists()


def test_site_packages_are_where_this_environments_modules_are_imported_from():
    import pytest as installed  # any installed package: its folder's parent is a site-packages folder

    assert str(Path(installed.__file__).resolve().parents[1]) in [
        str(Path(p).resolve()) for p in uv_pip.site_packages()
    ]

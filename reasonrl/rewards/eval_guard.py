"""Defence in depth: in verification workers, text from outside sympy may reach sympy's evaluator
(``parse_expr`` -> ``eval``) only as a plain number literal.

Why it is needed at all: math-verify's LaTeX parser builds numbers with ``sympy.Number("0.33")``, which goes
through ``sympify`` -> ``parse_expr`` -> ``eval``. The ANTLR grammar only lets digit tokens through there, but a
guard makes the property hold whatever path a future input finds.

How it decides: on every ``parse_expr`` call it walks up the stack past sympy's own plumbing (``sympify``,
``Number``, the parser, caches, decorators) to the code that supplied the string. If that is sympy itself (e.g.
``S('3/2')`` literals in sympy's lazily built integration tables) the call is allowed; anything else
(math-verify, latex2sympy, reasonrl, user code) must pass a number literal or gets ``ValueError``.
"""

from __future__ import annotations

import os
import re
import sys

NUMBER_LITERAL = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")

_SYMPY_DIR = None
_PLUMBING = (
    os.sep + os.path.join("core", "sympify.py"),
    os.sep + os.path.join("core", "numbers.py"),
    os.sep + os.path.join("core", "cache.py"),
    os.sep + os.path.join("core", "decorators.py"),
    os.sep + "parsing" + os.sep,
)


def _sympy_dir() -> str:
    global _SYMPY_DIR
    if _SYMPY_DIR is None:
        import sympy

        _SYMPY_DIR = os.path.dirname(os.path.abspath(sympy.__file__)) + os.sep
    return _SYMPY_DIR


def text_origin(depth: int = 1) -> str:
    """File name of the code that handed a string to sympy's evaluator: the first frame above ``depth`` that is
    not sympy plumbing (sympify, Number constructors, parser, caches, decorators)."""
    root = _sympy_dir()
    frame = sys._getframe(depth + 1)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith(root) and any(part in name[len(root) - 1 :] for part in _PLUMBING)):
            return name
        frame = frame.f_back
    return "<unknown>"


def from_sympy(filename: str) -> bool:
    return filename.startswith(_sympy_dir())


def install_eval_guard() -> None:
    """Wrap sympy's ``parse_expr`` in this process (see the module docstring). Idempotent. Installed by
    ``verify.worker_init`` in verification workers only, never in the caller's process."""
    import sympy.parsing
    import sympy.parsing.sympy_parser as sp

    if getattr(sp.parse_expr, "reasonrl_guard", False):
        return
    original = sp.parse_expr

    def guarded_parse_expr(s, *args, **kwargs):
        if not (isinstance(s, str) and NUMBER_LITERAL.fullmatch(s)) and not from_sympy(text_origin()):
            raise ValueError("reasonrl: sympy parse_expr refused (only number literals may be evaluated)")
        return original(s, *args, **kwargs)

    guarded_parse_expr.reasonrl_guard = True  # type: ignore[attr-defined]
    sp.parse_expr = guarded_parse_expr
    sympy.parsing.parse_expr = guarded_parse_expr
    for module_name in ("math_verify.parser", "latex2sympy2_extended.latex2sympy2"):  # bound by name there
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, "parse_expr"):
            module.parse_expr = guarded_parse_expr

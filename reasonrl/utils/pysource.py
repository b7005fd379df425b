"""What a Python file defines, read with ``ast`` (the file is never run): the names its top level binds and the
attributes of a class it defines, as far as they can be told without running it. Standard library only.

    defs = read_definitions("my_env.py")     # SyntaxError / OSError / UnicodeDecodeError as importing would
    defs.listing()                           # ['GuessNumber', 'WordGame', 'make_env']: the classes and functions
    defs.defines("GuessNumbr")               # False: no top-level binding of that name (None: cannot tell)
    defs.class_attributes("GuessNumber")     # {'__init__', 'reset', ...}, or None when a base class outside the
                                             # file, a decorator or a metaclass could add attributes

Used to refuse ``env_fn=file.py:Name`` (a missing name, a class without ``step``) before anything heavy is
imported, and to list what a file defines. Every answer errs on the side of "defined": the checks built on it only
refuse what importing the file would refuse too.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path

# Calls through which a module can bind names that ast cannot see, when run at import (``globals`` from anywhere);
# a star import, ``sys.modules`` and a module ``__getattr__`` too.
_DYNAMIC_CALLS = frozenset({"globals", "locals", "vars", "exec", "eval", "__import__"})
# Class decorators that never add or remove methods the checks ask about.
_PLAIN_DECORATORS = frozenset({"dataclass", "final", "total_ordering", "runtime_checkable"})
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass
class Definitions:
    """The top-level definitions of one file (see the module docstring)."""

    classes: list[str] = field(default_factory=list)  # top-level ``class`` statements, in file order
    functions: list[str] = field(default_factory=list)  # top-level ``def`` / ``async def``, in file order
    bound: set[str] = field(default_factory=set)  # every name the top level binds (the above included)
    dynamic: bool = False  # the module can bind names ast cannot see: ``defines`` answers None for unseen names
    setattr_used: bool = False  # ``setattr`` on something other than a class of the file or ``self``
    patched: set[str] = field(default_factory=set)  # names whose attributes are assigned (``Name.attr = ...``)
    class_nodes: dict[str, list[ast.ClassDef]] = field(default_factory=dict)  # the top-level class statements
    other_bindings: set[str] = field(default_factory=set)  # names bound by other statements (imports, assignments)

    def defines(self, name: str) -> bool | None:
        """Whether the top level binds ``name``: True, False, or None when the file binds names dynamically."""
        if name in self.bound:
            return True
        return None if self.dynamic else False

    def listing(self) -> list[str]:
        """The classes and functions the file defines at its top level, sorted (private names left out unless
        there is nothing else)."""
        names = sorted(set(self.classes) | set(self.functions))
        public = [n for n in names if not n.startswith("_")]
        return public or names

    def class_attributes(self, name: str) -> set[str] | None:
        """The attributes class ``name`` (a top-level class of the file) has, from its body and its bases defined
        in the same file; None when that cannot be told (a base from elsewhere, a decorator that may add methods,
        a metaclass, ``__init_subclass__``, ``setattr``, attributes assigned from outside, a name bound twice)."""
        return self._attributes(name, set())

    def _attributes(self, name: str, seen: set[str]) -> set[str] | None:
        nodes = self.class_nodes.get(name, [])
        if len(nodes) != 1 or name in seen or name in self.patched or self.setattr_used:
            return None
        if self._bound_elsewhere(name):
            return None
        (node,) = nodes
        if node.keywords or not all(_plain_decorator(d) for d in node.decorator_list):
            return None
        attributes = _body_names(node.body)
        if attributes is None or "__init_subclass__" in attributes:
            return None
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id == "object":
                continue
            if not isinstance(base, ast.Name) or base.id not in self.class_nodes:
                return None
            inherited = self._attributes(base.id, seen | {name})
            if inherited is None or "__init_subclass__" in inherited:
                return None
            attributes |= inherited
        return attributes

    def _bound_elsewhere(self, name: str) -> bool:
        """Whether ``name`` is also bound by something other than its ``class`` statement (an import, an
        assignment, a ``def`` of the same name): which binding wins cannot be told without running the file."""
        return name in self.functions or name in self.other_bindings


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _plain_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr in _PLAIN_DECORATORS
    return isinstance(target, ast.Name) and target.id in _PLAIN_DECORATORS


def _body_names(body: list[ast.stmt]) -> set[str] | None:
    """Names a class body binds (methods, nested classes, assignments, also under ``if`` / ``try``); None when it
    calls ``locals()`` / ``vars()`` / ``exec`` (which can bind more)."""
    names: set[str] = set()
    for statement in body:
        for node in _walk_scope(statement):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _DYNAMIC_CALLS:
                return None
        names |= _statement_bindings(statement)
    return names


def _walk_scope(node: ast.AST):
    """``ast.walk`` of ``node`` that does not enter nested functions, classes or lambdas (their own scopes), though
    it yields the ``def`` / ``class`` / ``lambda`` node itself and its decorators, defaults and bases."""
    yield node
    if isinstance(node, _SCOPES):
        outer = [*getattr(node, "decorator_list", []), *getattr(node, "bases", []), *getattr(node, "keywords", [])]
        if isinstance(node, (*_FUNCTIONS, ast.Lambda)):
            outer += [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        for child in outer:
            yield from _walk_scope(child)
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_scope(child)


def _statement_bindings(statement: ast.stmt) -> set[str]:
    """The names one statement of a scope binds in that scope (over-approximated: comprehension variables count)."""
    names: set[str] = set()
    for node in _walk_scope(statement):
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def parse_definitions(tree: ast.Module) -> Definitions:
    """:class:`Definitions` of a parsed module."""
    defs = Definitions()
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef):
            defs.classes.append(statement.name)
            defs.class_nodes.setdefault(statement.name, []).append(statement)
        elif isinstance(statement, _FUNCTIONS):
            defs.functions.append(statement.name)
        else:  # a class under a top-level if / try binds a name too (its attributes are not told)
            defs.other_bindings |= _statement_bindings(statement)
    defs.bound = set(defs.classes) | set(defs.functions) | defs.other_bindings
    # run at import (not inside a function): locals() / vars() / exec there bind module names
    module_level = {id(node) for statement in tree.body for node in _walk_scope(statement)}
    setattr_calls = setattr_names = 0
    for node in ast.walk(tree):  # anywhere in the file, functions included
        if isinstance(node, ast.Global):
            defs.bound |= set(node.names)  # a function may bind them when called at import
            defs.other_bindings |= set(node.names)
        elif isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            defs.dynamic = True
        elif isinstance(node, ast.Name) and node.id in _DYNAMIC_CALLS:
            defs.dynamic |= node.id == "globals" or id(node) in module_level  # globals() reaches them from anywhere
        elif isinstance(node, ast.Name) and node.id == "setattr":
            setattr_names += 1
        elif isinstance(node, ast.Call) and _is_name(node.func, "setattr"):
            setattr_calls += 1
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Name) and target.id in defs.class_nodes:
                defs.patched.add(target.id)  # setattr(Env, ...)
            elif not _is_name(target, "self"):  # setattr(self, ...) sets an instance's attribute, not the class's
                defs.setattr_used = True
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if isinstance(node.value, ast.Name):
                defs.patched.add(node.value.id)
        elif isinstance(node, ast.Attribute) and node.attr == "modules" and _is_name(node.value, "sys"):
            defs.dynamic = True  # sys.modules[__name__] = ... replaces the module
    if "__getattr__" in defs.bound:  # a module __getattr__ answers any name
        defs.dynamic = True
    if setattr_names > setattr_calls:  # setattr passed around (f = setattr): anything may be set
        defs.setattr_used = True
    return defs


def read_definitions(path: str | os.PathLike) -> Definitions:
    """:class:`Definitions` of the Python file at ``path``; raises ``OSError``, ``SyntaxError`` (``ValueError`` for
    null bytes) as reading or compiling it would (the encoding declaration is honoured)."""
    source = Path(path).read_bytes()
    return parse_definitions(ast.parse(source, filename=str(path)))


def module_source(name: str) -> tuple[bool, Path | None]:
    """``(found, file)`` of module ``name`` (dotted), located without importing anything: ``found`` False when its
    top-level package is not importable from here; ``file`` the ``.py`` source of the module when it can be told
    (None for a compiled or namespace module, or a submodule that only a custom finder or a package's own code
    would find)."""
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: nothing is imported
    except (ImportError, ValueError):
        return False, None
    if spec is None:
        return False, None
    for i in range(len(rest)):
        locations = spec.submodule_search_locations
        if locations is None:
            return True, None
        spec = importlib.machinery.PathFinder.find_spec(".".join([top, *rest[: i + 1]]), list(locations))
        if spec is None:
            return True, None
    origin = spec.origin if spec.has_location else None
    return True, (Path(origin) if origin and origin.endswith(".py") else None)

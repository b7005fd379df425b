"""The gateway's import rules (docs/architecture.md): one module may import vLLM's OpenAI server code, one imports
the HTTP stack, and the session logic is pure."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3] / "reasonrl"
GATEWAY = ROOT / "agents" / "gateway"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@functools.cache
def _all_imports() -> dict[str, set[str]]:
    return {str(path.relative_to(ROOT)): _imports(path) for path in ROOT.rglob("*.py")}


def _importers(prefix: str) -> set[str]:
    return {
        path
        for path, names in _all_imports().items()
        if any(name == prefix or name.startswith(prefix + ".") for name in names)
    }


def test_only_openai_protocol_may_import_vllm_entrypoints():
    assert _importers("vllm.entrypoints") <= {"agents/gateway/openai_protocol.py"}


def test_only_the_server_imports_the_http_stack():
    for module in ("fastapi", "uvicorn", "starlette"):
        assert {p for p in _importers(module) if p.startswith("agents/")} <= {"agents/gateway/server.py"}, module


def test_the_session_logic_is_pure():
    allowed = ("reasonrl.agents", "__future__", "dataclasses", "hashlib", "json", "typing", "collections")
    for name in ("backend.py", "messages.py", "framing.py", "sessions.py"):
        imports = _imports(GATEWAY / name)
        assert all(i.startswith(allowed) for i in imports), (name, imports)

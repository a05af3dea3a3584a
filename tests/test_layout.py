"""The layout is the architecture: core never imports bots, memory, reflector or chat SDKs."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FORBIDDEN_IN_CORE = ("bots", "memory", "reflector", "telegram", "discord")
ADAPTER_MAY_IMPORT = ("core",)
COMPOSITION_ROOTS = {"cli.py", "runtime.py", "app.py", "__init__.py"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_imports_no_outer_layer() -> None:
    for path in sorted((REPO / "core").rglob("*.py")):
        bad = imported_modules(path) & set(FORBIDDEN_IN_CORE)
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


def test_adapters_import_only_core() -> None:
    for path in sorted((REPO / "bots").glob("*.py")):
        if path.name in COMPOSITION_ROOTS:
            continue
        ours = imported_modules(path) & {"bots", "core", "memory", "reflector", "migrations"}
        assert ours <= {"core", "bots"}, f"{path.name} imports {sorted(ours)}"


def test_memory_and_reflector_never_import_bots() -> None:
    for package in ("memory", "reflector", "migrations"):
        for path in sorted((REPO / package).rglob("*.py")):
            assert "bots" not in imported_modules(path), path

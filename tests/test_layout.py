"""The layout is the architecture: import direction, no import cycles, a leaf turn API, one
builder of the agent, and SQL only behind the store modules."""

from __future__ import annotations

import ast
import builtins
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The rules share one parse of every module (`parsed`): one xdist worker runs them all.
pytestmark = pytest.mark.xdist_group("layout")
PRODUCT = ("core", "memory", "reflector", "bots", "migrations")
FORBIDDEN_IN_CORE = ("bots", "memory", "reflector", "telegram", "discord")
COMPOSITION_ROOTS = {"cli.py", "runtime.py", "plugins.py", "app.py", "__init__.py"}
TURN_ORCHESTRATOR = "core.turn.agent"
SQL = re.compile(
    r"\b(SELECT\s+\S|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|CREATE\s+(TABLE|INDEX|VIRTUAL|TRIGGER|UNIQUE)|DROP\s+(TABLE|INDEX)|ALTER\s+TABLE"
    r"|PRAGMA\s|BEGIN\s+IMMEDIATE|SAVEPOINT\s|ROLLBACK\b|SET\s+(CONSTRAINTS|LOCAL|SESSION)\s"
    r"|TRUNCATE\s|COPY\s+\w+\s*\(|LOCK\s+TABLE)"
)


def modules() -> dict[str, Path]:
    """Every product module by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in PRODUCT:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


@functools.cache
def walked(source: str) -> tuple[ast.AST, ...]:
    """Every node of a module's tree in `ast.walk`'s order, parsed and walked once for all
    the rules below (keyed by its text, so a file a test writes is read as it is)."""
    return tuple(ast.walk(ast.parse(source)))


def nodes_of(path: Path) -> tuple[ast.AST, ...]:
    return walked(path.read_text(encoding="utf-8"))


def imported_modules(path: Path) -> set[str]:
    """Top-level names of what a module imports (anywhere in it, TYPE_CHECKING too)."""
    names: set[str] = set()
    for node in nodes_of(path):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def import_graph() -> dict[str, set[str]]:
    """Module → product modules it imports: at module level, inside functions and under
    TYPE_CHECKING alike (`from package import module` counts as importing the module)."""
    known = modules()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for node in nodes_of(path):
            if isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [resolve(f"{node.module}.{alias.name}") for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t is not None and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


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


def test_the_turn_orchestrator_is_in_no_import_cycle() -> None:
    graph = import_graph()
    assert TURN_ORCHESTRATOR in graph
    involved = [sorted(component) for component in cycles(graph) if TURN_ORCHESTRATOR in component]
    assert involved == []


def test_no_product_module_is_in_an_import_cycle() -> None:
    assert [sorted(component) for component in cycles(import_graph())] == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_the_turn_api_is_a_leaf() -> None:
    ours = {t for t in import_graph()["core.api"]}
    assert ours <= {"core.errors", "core.events"}, ours


def test_only_the_assembly_builds_an_agent() -> None:
    builders = []
    for name, path in modules().items():
        for node in nodes_of(path):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Agent":
                builders.append(name)
    assert builders == ["core.turn.assembly"]


def is_store_module(path: Path) -> bool:
    """Where SQL may live: the packages' store modules, the connection, the migrations."""
    relative = path.relative_to(REPO)
    return (
        path.name == "store.py"
        or path.name.endswith("_store.py")
        or relative
        in (
            Path("core/storage/db.py"),
            Path("core/storage/pg_db.py"),
            Path("core/storage/database.py"),
        )
        or relative in INDEX_MODULES
        or relative.parts[0] == "migrations"
    )


# A table is written once: every store sits on `core.storage.database`'s seam with `?` placeholders.
# Only these modules may name an engine (its driver, its connection module, psycopg's `%s`):
# the seam and its dialect, the vector and full-text indexes, and the SQLite-only backup and
# the SQLite-to-PostgreSQL copy, which are about one engine by nature.
INDEX_MODULES = (
    Path("memory/sqlite_index.py"),
    Path("memory/pg_index.py"),
    Path("memory/memory_index.py"),
)
ENGINE_MODULES = (
    Path("core/storage/db.py"),
    Path("core/storage/pg_db.py"),
    Path("core/storage/database.py"),
    Path("core/storage/dialect.py"),
    Path("core/storage/engine.py"),
    Path("core/storage/backup_store.py"),
    Path("core/storage/copy_store.py"),
    *INDEX_MODULES,
)
ENGINE_IMPORTS = ("sqlite3", "pysqlite3", "sqlite_vec", "psycopg", "psycopg_pool")
ENGINE_CONNECTIONS = ("core.storage.db", "core.storage.pg_db")
ENGINE_NAMED_STORE = re.compile(r"^(pg|sqlite)_.*store.*\.py$")
PYFORMAT = re.compile(r"%s|%\(\w+\)s")


def engine_names_in(path: Path) -> Iterator[str]:
    """Imports of an engine's driver or connection module, and psycopg placeholders in SQL."""

    def names_engine(module: str) -> bool:
        return module.split(".")[0] in ENGINE_IMPORTS or module in ENGINE_CONNECTIONS

    for node in nodes_of(path):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if names_engine(alias.name):
                    yield f"line {node.lineno}: import {alias.name}"
        elif (
            isinstance(node, ast.ImportFrom) and node.level == 0 and names_engine(node.module or "")
        ):
            yield f"line {node.lineno}: from {node.module} import …"
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and SQL.search(node.value)
            and PYFORMAT.search(node.value)
        ):
            yield f"line {node.lineno}: %s placeholder in {node.value[:40]!r}"


EXECUTE = ("execute", "executemany", "executescript")
CONNECTION_NAMES = ("conn", "connection", "db", "cursor", "cur", "pg")


def sql_in(path: Path) -> Iterator[str]:
    """SQL-looking string literals (f-string parts too) and `.execute` calls, docstrings aside."""
    walk = nodes_of(path)
    docstrings = {
        id(node.body[0].value)
        for node in walk
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in sorted(walk, key=lambda node: getattr(node, "lineno", 0)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings and SQL.search(node.value):
                yield f"line {node.lineno}: {node.value[:60]!r}"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            receiver = node.func.value
            owner = getattr(receiver, "id", None) or getattr(receiver, "attr", "")
            if node.func.attr in EXECUTE and str(owner).endswith(CONNECTION_NAMES):
                yield f"line {node.lineno}: {owner}.{node.func.attr}(…)"


def test_sql_lives_only_in_store_modules() -> None:
    found = {
        str(path.relative_to(REPO)): list(sql_in(path))
        for path in modules().values()
        if not is_store_module(path)
    }
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_stores_name_no_engine() -> None:
    """Every store is one class over `core.storage.database` for both engines."""
    found = {
        str(path.relative_to(REPO)): list(engine_names_in(path))
        for path in modules().values()
        if is_store_module(path)
        and path.relative_to(REPO) not in ENGINE_MODULES
        and path.relative_to(REPO).parts[0] != "migrations"
    }
    assert {path: lines for path, lines in found.items() if lines} == {}


def test_no_store_is_named_for_an_engine() -> None:
    named = [
        str(path.relative_to(REPO))
        for path in modules().values()
        if ENGINE_NAMED_STORE.match(path.name)
    ]
    assert named == []


def test_the_engine_check_sees_an_engine(tmp_path: Path) -> None:
    sample = tmp_path / "sample_store.py"
    sample.write_text(
        "import psycopg\n"
        "from core.storage.db import Connection\n"
        'x = "SELECT id FROM memories WHERE id = %s"\n'
        'y = "SELECT id FROM memories WHERE id = ?"\n',
        encoding="utf-8",
    )
    assert [line.split(":")[0] for line in engine_names_in(sample)] == [
        "line 1",
        "line 2",
        "line 3",
    ]


def test_the_sql_check_sees_sql(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docs may say SELECT * FROM memories."""\n'
        'x = f"SELECT id FROM {table} WHERE a = ?"\n'
        "conn.execute(x)\n"
        'note = f"UPDATE {op_id}: too long"\n',
        encoding="utf-8",
    )
    assert [line.split(":")[0] for line in sql_in(sample)] == ["line 2", "line 3"]


def exception_classes_outside_the_tree() -> list[str]:
    """Exception classes of product modules that do not descend from `core/errors.py`'s
    tree (the test harnesses under `core/bench/fakes/` aside: their failures are not Mnemo's)."""
    in_tree = {
        node.name for node in nodes_of(REPO / "core/errors.py") if isinstance(node, ast.ClassDef)
    }
    classes: list[tuple[str, set[str]]] = []
    for name, path in modules().items():
        if name == "core.errors" or name.startswith("core.bench.fakes"):
            continue
        for node in nodes_of(path):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(b, "id", None) or getattr(b, "attr", "") for b in node.bases}
                classes.append((f"{name}.{node.name}", bases))
    grown = True
    while grown:  # subclasses of subclasses, defined in any order
        before = len(in_tree)
        in_tree.update(dotted.rpartition(".")[2] for dotted, bases in classes if bases & in_tree)
        grown = len(in_tree) > before
    return [
        dotted
        for dotted, bases in classes
        if not bases & in_tree and any(_is_builtin_exception(base) for base in bases)
    ]


def _is_builtin_exception(name: str) -> bool:
    value = getattr(builtins, name, None)
    return isinstance(value, type) and issubclass(value, BaseException)


def test_every_error_joins_the_tree() -> None:
    assert exception_classes_outside_the_tree() == []


MAX_FUNCTION_LINES = 50


def test_no_function_is_over_fifty_lines() -> None:
    """Functions stay short enough to read at once (signature and docstring included)."""
    long = [
        f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
        for name, path in modules().items()
        for node in nodes_of(path)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


# --- core sub-package layering (issue 27; added by restructure.py) ---
# Each part of core is a sub-package named for what it owns; a layer never imports the ones
# above it. (Names are built from parts, never written whole, so that the layout script
# can be rerun over this file.)
CORE_PARTS = (
    "turn", "tools", "context", "model", "storage", "chat", "cli", "bench", "skills", "mcp",
    "subagents",
    "web_tools",
    "tasks",
)  # fmt: skip
CORE_TOP = ("api", "errors", "events", "clock", "text", "config", "plugin")
NEVER_IMPORTS = {
    "storage": ("turn", "tools", "context", "chat", "cli", "bench"),
    "model": ("turn", "tools", "context", "chat", "cli", "bench"),
    "tools": ("turn", "context", "cli", "bench"),
    "context": ("turn", "cli", "bench"),
    "chat": ("cli", "bench"),
    "turn": ("cli", "bench", "subagents"),
    "subagents": ("cli", "bench"),
}


_GRAPH: dict[str, set[str]] = {}


def graph_once() -> dict[str, set[str]]:
    """The import graph, built once for the rules below (it parses every module)."""
    if not _GRAPH:
        _GRAPH.update(import_graph())
    return _GRAPH


def core_part(module: str) -> str | None:
    """The sub-package of core a module belongs to (`core.x.y` → `x`), if any."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "core" else None


def test_core_holds_only_its_parts_and_top_modules() -> None:
    """A new module lands in the sub-package it belongs to, not loose in core/."""
    loose = [
        name
        for name in modules()
        if name.startswith("core" + ".")
        and core_part(name) is None
        and name.split(".")[1] not in CORE_PARTS + CORE_TOP
    ]
    assert loose == []


def test_no_core_part_imports_a_layer_above() -> None:
    bad = sorted(
        f"{name} imports {target}"
        for name, targets in graph_once().items()
        for target in targets
        if core_part(target) in NEVER_IMPORTS.get(core_part(name) or "", ())
    )
    assert bad == []


def test_the_top_modules_of_core_import_no_part() -> None:
    """The turn API, config, errors, events, clock and text sit under every part (the
    core's plugin, a composition root, aside)."""
    bad = sorted(
        f"{name} imports {target}"
        for name, targets in graph_once().items()
        if name.startswith("core" + ".") and name.split(".")[1] in CORE_TOP[:-1]
        for target in targets
        if core_part(target) is not None
    )
    assert bad == []


def test_only_benches_the_core_plugin_and_tests_use_the_bench_package() -> None:
    """The benchmarks and their fakes stay out of the turn's path."""
    bench = "core" + ".bench"
    users = sorted(
        name
        for name, targets in graph_once().items()
        if "bench" not in name.split(".") and name != "core" + ".plugin"
        if any(t == bench or t.startswith(bench + ".") for t in targets)
    )
    assert users == []


def test_product_code_never_imports_the_tests() -> None:
    bad = [str(path) for path in modules().values() if "tests" in imported_modules(path)]
    assert bad == []

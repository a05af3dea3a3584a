"""The SQL of `mnemo storage migrate`: read every table of a SQLite database and bulk-copy
it into the same table on PostgreSQL (COPY), in foreign-key order, in one transaction.

Both engines have the same tables with the same columns (migrations/__init__.py), so the
copy is generic; what SQLite keeps in virtual tables (FTS5, sqlite-vec) is not copied:
PostgreSQL derives it from the copied rows (a tsvector index, the memory package's vectors).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.storage.db import Connection
from core.storage.pg_db import PgDatabase

BATCH_ROWS = 5_000


@dataclass(frozen=True)
class CopyTable:
    name: str
    columns: tuple[str, ...]
    rows: int


def sqlite_tables(conn: Connection) -> dict[str, tuple[str, ...]]:
    """Plain tables of the SQLite database (no virtual tables, their shadow tables, or
    SQLite's and the migrations' own), with their columns."""
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    virtual = [name for name, sql in rows if str(sql or "").upper().startswith("CREATE VIRTUAL")]
    tables: dict[str, tuple[str, ...]] = {}
    for name, _ in rows:
        if name == "_migrations" or name in virtual:
            continue
        if any(name.startswith(f"{parent}_") for parent in virtual):
            continue  # an FTS5 or vec0 shadow table
        columns = tuple(row[1] for row in conn.execute(f'PRAGMA table_info("{name}")'))
        tables[name] = columns
    return tables


def sqlite_row_count(conn: Connection, table: str) -> int:
    return int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def sqlite_rows(
    conn: Connection, table: str, columns: tuple[str, ...]
) -> Iterator[tuple[Any, ...]]:
    names = ", ".join(f'"{c}"' for c in columns)
    cursor = conn.execute(f'SELECT {names} FROM "{table}" ORDER BY rowid')
    while batch := cursor.fetchmany(BATCH_ROWS):
        yield from batch


def applied_migrations_sqlite(conn: Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT name FROM _migrations ORDER BY name")]


def applied_migrations_pg(db: PgDatabase) -> list[str]:
    return [str(row[0]) for row in db.read("SELECT name FROM _migrations ORDER BY name")]


def pg_tables_in_fk_order(pg: Any) -> list[str]:
    """The public tables, every table after the tables its foreign keys point to."""
    tables = [
        str(row[0])
        for row in pg.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
    ]
    edges = pg.execute(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c"
        " JOIN pg_namespace n ON n.oid = c.connamespace"
        " WHERE c.contype = 'f' AND n.nspname = 'public'"
    ).fetchall()
    needs: dict[str, set[str]] = {table: set() for table in tables}
    for child, parent in edges:
        if child != parent and child in needs:
            needs[child].add(parent)
    ordered: list[str] = []
    while needs:
        ready = sorted(t for t, parents in needs.items() if not parents - set(ordered))
        if not ready:  # a cycle: the rest in name order (FK checks are deferred to commit)
            ready = sorted(needs)
        for table in ready:
            ordered.append(table)
            del needs[table]
    return ordered


def pg_defer_constraints(pg: Any) -> None:
    """Foreign keys checked at commit, so rows may arrive before what they point at."""
    pg.execute("SET CONSTRAINTS ALL DEFERRED")


def pg_row_count(pg: Any, table: str) -> int:
    return int(pg.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])


def pg_columns(pg: Any, table: str) -> tuple[str, ...]:
    """The table's columns a copy writes: not the generated ones (`memories.text_search`,
    m0025), which PostgreSQL computes and refuses to be given."""
    rows = pg.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public'"
        " AND table_name = %s AND is_generated = 'NEVER' ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return tuple(str(row[0]) for row in rows)


def pg_triggers(pg: Any, table: str, enabled: bool) -> None:
    """Switch the table's own triggers (the change log's) off while copying: the copied
    change-log rows are the history, a trigger would write a second one."""
    pg.execute(f'ALTER TABLE "{table}" {"ENABLE" if enabled else "DISABLE"} TRIGGER USER')


def pg_copy_rows(
    pg: Any, table: str, columns: tuple[str, ...], rows: Iterator[tuple[Any, ...]]
) -> int:
    names = ", ".join(f'"{c}"' for c in columns)
    copied = 0
    with pg.cursor() as cursor, cursor.copy(f'COPY "{table}" ({names}) FROM STDIN') as copy:
        for row in rows:
            copy.write_row(row)
            copied += 1
    return copied


def pg_reset_identities(pg: Any, table: str) -> None:
    """Move each identity column's sequence past the copied ids."""
    identities = pg.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public'"
        " AND table_name = %s AND is_identity = 'YES'",
        (table,),
    ).fetchall()
    for (column,) in identities:
        pg.execute(
            f"SELECT setval(pg_get_serial_sequence(%s, %s),"
            f' coalesce((SELECT max("{column}") FROM "{table}"), 0) + 1, false)',
            (f'"{table}"', column),
        )


def pg_drop_everything(url: str) -> None:
    """Empty a database completely (the scale benchmark's own, between runs)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")

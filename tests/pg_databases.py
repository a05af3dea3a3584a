"""Migrated PostgreSQL databases for the tests, reused from one test to the next.

Creating a database costs PostgreSQL far more than any small test run in it: `CREATE
DATABASE … TEMPLATE` copies ~420 files and checkpoints twice, `DROP DATABASE` unlinks them
again, and the first connections to a new database read its catalogs afresh: ~0.5 CPU-s a
test, mostly the kernel's (file creation and removal), against ~0.05 s to put a used
database back as it was. `MigratedDatabases` hands out copies of the session's migrated
template and, when a test is done with one, puts it back in the template's state:

- every other connection to it ends (as `DROP DATABASE … WITH (FORCE)` would end them);
- relations the template does not have (the memory vector tables a runtime makes, a test's
  own) are dropped; tables that hold rows are truncated (new empty files, as in a fresh
  copy: no dead rows, no reused space); sequences start again; the statistics are reset;
- its schema and the rows of the tables that the template fills (the migration records) are
  compared with the template's (a digest of the catalog: relations, columns, defaults,
  indexes, constraints, triggers, functions, types, extensions, sequences, settings).
  Anything else differs: the database is dropped, never reused.

A test therefore sees what a fresh copy gives. Only the database's name and its objects'
internal ids (OIDs, file numbers) can tell a reused one from a new one.
"""

from __future__ import annotations

import itertools
from typing import Any

from core.bench.fakes.postgres import PostgresServer

# Relations and types of the user's schemas (not the system's nor TOAST's).
USER_SCHEMAS = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'"
    " AND n.nspname NOT LIKE 'pg_temp%'"
)
RELATIONS = f"""
SELECT n.nspname, c.relname, c.relkind FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE {USER_SCHEMAS} AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                  AND d.objid = c.oid AND d.deptype IN ('e', 'i', 'a'))
ORDER BY 1, 2
"""
# What must equal the template's for a database to be reused: each line one list, in order.
_DIGEST_PARTS = (
    "format('%s.%s:%s:%s', n.nspname, c.relname, c.relkind, c.reloptions)"
    f" FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER_SCHEMAS}",
    "format('%s.%s:%s:%s:%s:%s:%s', c.relname, a.attnum, a.attname,"
    " format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attisdropped,"
    " pg_get_expr(d.adbin, d.adrelid))"
    " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
    f" WHERE {USER_SCHEMAS} AND a.attnum > 0",
    "pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid"
    f" JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {USER_SCHEMAS}",
    "format('%s:%s', conname, pg_get_constraintdef(k.oid)) FROM pg_constraint k"
    f" JOIN pg_namespace n ON n.oid = k.connamespace WHERE {USER_SCHEMAS}",
    "pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal",
    "format('%s.%s(%s):%s', n.nspname, p.proname, pg_get_function_identity_arguments(p.oid),"
    " md5(p.prosrc)) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
    f" WHERE {USER_SCHEMAS}",
    "format('%s.%s:%s', n.nspname, t.typname, t.typtype) FROM pg_type t"
    f" JOIN pg_namespace n ON n.oid = t.typnamespace WHERE {USER_SCHEMAS}",
    "format('%s:%s', extname, extversion) FROM pg_extension",
    "format('%s:%s:%s', nspname, nspowner::regrole, nspacl) FROM pg_namespace n"
    f" WHERE {USER_SCHEMAS}",
    "format('%s.%s:%s:%s:%s:%s:%s', schemaname, sequencename, start_value, increment_by,"
    " min_value, max_value, last_value) FROM pg_sequences",
    "array_to_string(setconfig, ';') FROM pg_db_role_setting"
    " WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())",
)
SCHEMA_DIGEST = "SELECT md5(concat_ws('|', {}))".format(
    ", ".join(f"(SELECT string_agg(x, ',' ORDER BY x) FROM (SELECT {part}) AS s(x))"
              for part in _DIGEST_PARTS)
)  # fmt: skip
OTHER_CONNECTIONS = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
SCHEMAS = f"SELECT nspname FROM pg_namespace n WHERE {USER_SCHEMAS}"
# The public schema as a new database has it (PostgreSQL 15 on).
PUBLIC_SCHEMA = (
    "CREATE SCHEMA public AUTHORIZATION pg_database_owner",
    "GRANT USAGE ON SCHEMA public TO PUBLIC",
    "COMMENT ON SCHEMA public IS 'standard public schema'",
)
CHANGED_SEQUENCES = (
    "SELECT format('%I.%I', schemaname, sequencename), start_value FROM pg_sequences"
    " WHERE last_value IS NOT NULL"
)
_COPY_NUMBERS = itertools.count(1)


class MigratedDatabases:
    """Copies of one migrated template on one server: `take()` one, `give_back()` it.

    With `blank`, copies of an empty template (`template1`, what `createdb` copies) that
    the tests fill as they like: putting one back drops every schema and what is in it
    (extensions too), then makes the public schema again as a new database has it."""

    def __init__(self, server: PostgresServer, template: str, blank: bool = False) -> None:
        self.server = server
        self.template = template
        self.blank = blank
        self.idle: list[str] = []
        with self._connect(template) as conn:
            self.relations = set(conn.execute(RELATIONS).fetchall())
            self.tables = sorted(
                f'"{schema}"."{relation}"' for schema, relation, kind in self.relations
                if kind in "rp"
            )  # fmt: skip
            self.digest = conn.execute(SCHEMA_DIGEST).fetchone()
            self.seeded = {table: self._rows(conn, table) for table in self._filled(conn)}

    def take(self) -> str:
        """The name of a database in the template's state, nobody connected to it."""
        if self.idle:
            return self.idle.pop()
        name = f"copy_{next(_COPY_NUMBERS)}"  # unique in this process (its own server)
        self.server.create_database(name, template=self.template)
        return name

    def give_back(self, name: str) -> bool:
        """Put `name` back in the template's state for the next test, or drop it when that
        cannot be done; whether it was kept."""
        try:
            kept = self._reset(name)
        except Exception:  # psycopg's errors, whatever the test left behind: drop it
            kept = False
        if kept:
            self.idle.append(name)
        else:
            self.server.drop_database(name)
        return kept

    def _reset(self, name: str) -> bool:
        with self._connect(name) as conn:
            conn.execute(OTHER_CONNECTIONS)
            with conn.transaction():
                if self.blank:
                    self._drop_schemas(conn)
                if not self._drop_extra_relations(conn):
                    return False
                self._empty(conn)
            conn.execute("SELECT pg_stat_reset()")
            if conn.execute(SCHEMA_DIGEST).fetchone() != self.digest:
                return False
            return all(self._rows(conn, table) == rows for table, rows in self.seeded.items())

    def _drop_extra_relations(self, conn: Any) -> bool:
        """Drop what the template lacks; False when something of the template is gone."""
        found = set(conn.execute(RELATIONS).fetchall())
        if not self.relations <= found:
            return False
        kinds = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW",
                 "S": "SEQUENCE", "f": "FOREIGN TABLE"}  # fmt: skip
        for schema, relation, kind in sorted(found - self.relations):
            conn.execute(f'DROP {kinds[kind]} IF EXISTS "{schema}"."{relation}" CASCADE')
        return True

    @staticmethod
    def _drop_schemas(conn: Any) -> None:
        """Drop every schema with what it holds, then make the public schema again."""
        for (schema,) in conn.execute(SCHEMAS).fetchall():
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        for statement in PUBLIC_SCHEMA:
            conn.execute(statement)

    def _empty(self, conn: Any) -> None:
        """Truncate the tables that hold rows (those the template fills aside) and start every
        used sequence again."""
        filled = [table for table in self._filled(conn) if table not in self.seeded]
        if filled:
            conn.execute(f"TRUNCATE {', '.join(filled)} CASCADE")
        for sequence, start in conn.execute(CHANGED_SEQUENCES).fetchall():
            conn.execute("SELECT setval(%s, %s, false)", (sequence, start))

    def _filled(self, conn: Any) -> list[str]:
        """The template's tables that hold a row, in one round trip."""
        if not self.tables:  # a blank template
            return []
        probes = " UNION ALL ".join(
            f"(SELECT {index} FROM {table} LIMIT 1)" for index, table in enumerate(self.tables)
        )
        return [self.tables[index] for (index,) in conn.execute(probes).fetchall()]

    @staticmethod
    def _rows(conn: Any, table: str) -> list[tuple[Any, ...]]:
        return sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)

    def _connect(self, name: str) -> Any:
        import psycopg

        return psycopg.connect(self.server.url(name), autocommit=True, connect_timeout=10)

    def close(self) -> None:
        """Drop every idle copy (the server's data dir goes at its stop anyway)."""
        while self.idle:
            self.server.drop_database(self.idle.pop())

"""The one seam every store sits on: `Database` (read, write, transaction; `?` placeholders)
with a SQLite implementation over `core.storage.db`'s connection and a PostgreSQL one over
`core.storage.pg_db`'s pool. A store is written once against it; what differs between the engines
is in `core.storage.dialect`.

Units of work: `with db.transaction():` — nested use joins the outer one, so a turn's
writes (its messages, its inbox state, its reply) commit together or not at all. On SQLite
that is `BEGIN IMMEDIATE … COMMIT` on the one connection; on PostgreSQL the connection the
transaction holds is kept in a context variable that every store's statement uses. Outside
a transaction each statement commits on its own. Never `await` inside a transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from core.errors import StorageError, StorageFull
from core.storage.db import Connection, DatabaseError, check_file, is_full, scrub_deleted
from core.storage.db import transaction as sqlite_transaction
from core.storage.dialect import POSTGRESQL, SQLITE, Dialect, postgresql_sql, sqlite_sql
from core.storage.pg_db import PgDatabase

Row = tuple[Any, ...]
Params = Sequence[Any]


class Database(Protocol):
    """What a store needs of a database, whichever engine it is."""

    dialect: Dialect

    def read(self, sql: str, params: Params = ()) -> list[Row]:
        """Every row of one statement (a `SELECT`, or a write with `RETURNING`)."""
        ...

    def read_one(self, sql: str, params: Params = (), *, binary: bool = False) -> Row | None:
        """The first row of one statement, or None. `binary`: rows travel in the engine's
        binary format where it has one (a large blob: PostgreSQL otherwise sends `bytea` as
        hex text, about three times slower to read)."""
        ...

    def write(self, sql: str, params: Params = ()) -> int:
        """One statement; how many rows it changed."""
        ...

    def write_many(self, sql: str, rows: Sequence[Params]) -> None:
        """One statement for each of `rows` (one round trip on PostgreSQL)."""
        ...

    def write_returning(self, sql: str, rows: Sequence[Params]) -> list[Row]:
        """One `… RETURNING` statement for each of `rows`: each one's first row, in order."""
        ...

    def transaction(self) -> AbstractContextManager[None]:
        """A unit of work; nested use joins the outer one."""
        ...

    def savepoint(self, name: str) -> AbstractContextManager[None]:
        """Inside a transaction: a part rolled back alone if it raises."""
        ...

    def in_transaction(self) -> bool: ...

    def scrub_deleted(self, tables: Sequence[str] = ()) -> None:
        """After a deletion that promises permanence: leave no copy of the deleted rows
        where the engine can still hold one. SQLite: checkpoint and truncate the WAL
        (`secure_delete` already zeroed the freed bytes). PostgreSQL: VACUUM `tables` (none:
        every table). Nothing inside a transaction (the caller's commit comes first)."""
        ...

    def check_file(self) -> None:
        """SQLite: raise `DatabaseGone` when the database file was deleted or replaced
        under this process. PostgreSQL: nothing to check (the server owns the files)."""
        ...

    def describe(self) -> str:
        """One line for logs and `mnemo doctor`."""
        ...

    def close(self) -> None: ...


@contextmanager
def _savepoint(db: Database, name: str) -> Iterator[None]:
    db.write(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        db.write(f"ROLLBACK TO SAVEPOINT {name}")
        db.write(f"RELEASE SAVEPOINT {name}")
        raise
    db.write(f"RELEASE SAVEPOINT {name}")


class SqliteDatabase:
    """The seam over one SQLite connection (`core.storage.db.connect`)."""

    dialect = SQLITE

    def __init__(self, conn: Connection) -> None:
        self.conn = conn  # SQLite-only tools (backup, vector index) use it directly

    def read(self, sql: str, params: Params = ()) -> list[Row]:
        try:
            rows: list[Row] = self.conn.execute(sqlite_sql(sql), params).fetchall()
        except DatabaseError as exc:
            _raise_if_full(exc)
            raise
        return rows

    def read_one(self, sql: str, params: Params = (), *, binary: bool = False) -> Row | None:
        # Every row fetched: a write's `RETURNING` statement is done (and, outside a
        # transaction, committed) only once its rows are read to the end.
        try:
            rows: list[Row] = self.conn.execute(sqlite_sql(sql), params).fetchall()
        except DatabaseError as exc:
            _raise_if_full(exc)
            raise
        return rows[0] if rows else None

    def write(self, sql: str, params: Params = ()) -> int:
        try:
            return int(self.conn.execute(sqlite_sql(sql), params).rowcount)
        except DatabaseError as exc:
            _raise_if_full(exc)
            raise

    def write_many(self, sql: str, rows: Sequence[Params]) -> None:
        with self.transaction():
            self.conn.executemany(sqlite_sql(sql), rows)

    def write_returning(self, sql: str, rows: Sequence[Params]) -> list[Row]:
        translated = sqlite_sql(sql)
        with self.transaction():
            return [self.conn.execute(translated, params).fetchall()[0] for params in rows]

    def transaction(self) -> AbstractContextManager[None]:
        return _no_value(sqlite_transaction(self.conn))

    def savepoint(self, name: str) -> AbstractContextManager[None]:
        return _savepoint(self, name)

    def in_transaction(self) -> bool:
        return bool(self.conn.in_transaction)

    def scrub_deleted(self, tables: Sequence[str] = ()) -> None:
        scrub_deleted(self.conn)  # a no-op inside a transaction

    def check_file(self) -> None:
        check_file(self.conn)

    def describe(self) -> str:
        return f"{self.conn.info.path} (SQLite {self.conn.info.sqlite_version})"

    def close(self) -> None:
        self.conn.close()


def sqlite_connection(db: Database) -> Connection:
    """The SQLite connection under `db`, for SQLite-only tools (backup, the FTS5 bench); a
    clear error on PostgreSQL."""
    if not isinstance(db, SqliteDatabase):
        raise StorageError("this works on the SQLite store only ([storage] url is PostgreSQL)")
    return db.conn


class PostgresDatabase:
    """The seam over a `PgDatabase` pool; `?` placeholders become psycopg's `%s`."""

    dialect = POSTGRESQL

    def __init__(self, pg: PgDatabase) -> None:
        self.pg = pg  # PostgreSQL-only tools (COPY, the vector index) use it directly

    def read(self, sql: str, params: Params = ()) -> list[Row]:
        return self.pg.read(postgresql_sql(sql), params)

    def read_one(self, sql: str, params: Params = (), *, binary: bool = False) -> Row | None:
        return self.pg.read_one(postgresql_sql(sql), params, binary=binary)

    def write(self, sql: str, params: Params = ()) -> int:
        return self.pg.write(postgresql_sql(sql), params)

    def write_many(self, sql: str, rows: Sequence[Params]) -> None:
        if not rows:
            return
        with self.pg.transaction() as conn, conn.cursor() as cursor:
            cursor.executemany(postgresql_sql(sql), rows)

    def write_returning(self, sql: str, rows: Sequence[Params]) -> list[Row]:
        if not rows:
            return []
        found: list[Row] = []
        with self.pg.transaction() as conn, conn.cursor() as cursor:
            # One round trip (pipeline mode); each statement's rows in order.
            cursor.executemany(postgresql_sql(sql), rows, returning=True)
            while True:
                found.append(cursor.fetchone())
                if not cursor.nextset():
                    break
        return found

    def transaction(self) -> AbstractContextManager[None]:
        return _no_value(self.pg.transaction())

    def savepoint(self, name: str) -> AbstractContextManager[None]:
        return _savepoint(self, name)

    def in_transaction(self) -> bool:
        return self.pg.in_transaction()

    def scrub_deleted(self, tables: Sequence[str] = ()) -> None:
        if not self.pg.in_transaction():  # VACUUM cannot run inside one
            self.pg.vacuum(tables)

    def check_file(self) -> None:
        return None

    def describe(self) -> str:
        info = self.pg.info
        return f"{info.display_url} (PostgreSQL {info.server_version})"

    def close(self) -> None:
        self.pg.close()


@contextmanager
def _no_value(inner: AbstractContextManager[Any]) -> Iterator[None]:
    """A transaction as the seam shows it: no connection handed out."""
    with inner:
        yield


def _raise_if_full(exc: DatabaseError) -> None:
    """SQLite's "database or disk is full" as `StorageFull`, also outside a transaction."""
    if is_full(exc):
        raise StorageFull(f"the database or disk is full: {exc}") from exc

"""The database a process works on, whichever engine the config names: `open_storage`.

`[storage] url` unset or `sqlite:///…`: one SQLite file (`core.storage.db`), the default for one
machine. `postgresql://…`: a PostgreSQL pool (`core.storage.pg_db`) that bot processes and reflector
workers on many machines share. Every store sits on `Storage.database` (`core.storage.database`), so
the engine is chosen once, here; an SQLite-only tool (backup) asks the database for its
connection (`SqliteDatabase.conn`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config import StorageConfig
from core.storage.database import Database, PostgresDatabase, SqliteDatabase
from core.storage.db import Connection, connect
from core.storage.pg_db import PgDatabase


@dataclass
class Storage:
    """One process's open database."""

    database: Database

    @property
    def engine(self) -> Literal["sqlite", "postgresql"]:
        return self.database.dialect.engine

    def describe(self) -> str:
        """One line for logs and `mnemo doctor`."""
        return self.database.describe()

    def check_file(self) -> None:
        """SQLite: raise `DatabaseGone` when the database file was deleted or replaced
        under this process. PostgreSQL: nothing to check (the server owns the files)."""
        self.database.check_file()

    def close(self) -> None:
        self.database.close()


def open_storage(config: StorageConfig, *, migrate: bool = True) -> Storage:
    """Open (and by default migrate) the database `config` names."""
    if config.engine == "postgresql":
        return postgres_storage(PgDatabase(config.url, pool_size=config.pool_size, migrate=migrate))
    return sqlite_storage(connect(config.database_path, migrate=migrate))


def sqlite_storage(conn: Connection) -> Storage:
    """A `Storage` around an open SQLite connection (tests and benchmarks)."""
    return Storage(SqliteDatabase(conn))


def postgres_storage(pg: PgDatabase) -> Storage:
    """A `Storage` around an open PostgreSQL pool."""
    return Storage(PostgresDatabase(pg))

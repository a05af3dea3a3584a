"""The database a process works on, whichever engine the config names: `open_storage`.

`[storage] url` unset or `sqlite:///…`: one SQLite file (`core.db`), the default for one
machine. `postgresql://…`: a PostgreSQL pool (`core.pg_db`) that bot processes and reflector
workers on many machines share. Every store sits on `Storage.database` (`core.database`), so
the engine is chosen once, here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from core.config import StorageConfig
from core.database import Database, PostgresDatabase, SqliteDatabase
from core.db import Connection, connect
from core.errors import StorageError
from core.pg_db import PgDatabase


@dataclass
class Storage:
    """One process's open database: exactly one of `sqlite` and `postgres` is set."""

    sqlite: Connection | None = None
    postgres: PgDatabase | None = None
    database: Database = field(init=False)

    def __post_init__(self) -> None:
        if self.postgres is not None:
            self.database = PostgresDatabase(self.postgres)
        else:
            self.database = SqliteDatabase(self.sqlite_conn)

    @property
    def engine(self) -> Literal["sqlite", "postgresql"]:
        return "postgresql" if self.postgres is not None else "sqlite"

    @property
    def sqlite_conn(self) -> Connection:
        """The SQLite connection; a clear error on PostgreSQL (for SQLite-only tools)."""
        if self.sqlite is None:
            raise StorageError("this works on the SQLite store only ([storage] url is PostgreSQL)")
        return self.sqlite

    @property
    def pg(self) -> PgDatabase:
        if self.postgres is None:
            raise StorageError("this needs the PostgreSQL store")
        return self.postgres

    def describe(self) -> str:
        """One line for logs and `mnemo doctor`."""
        return self.database.describe()

    def close(self) -> None:
        if self.postgres is not None:
            self.postgres.close()
        if self.sqlite is not None:
            self.sqlite.close()


def open_storage(config: StorageConfig, *, migrate: bool = True) -> Storage:
    """Open (and by default migrate) the database `config` names."""
    if config.engine == "postgresql":
        return Storage(postgres=PgDatabase(config.url, pool_size=config.pool_size, migrate=migrate))
    return Storage(sqlite=connect(config.database_path, migrate=migrate))


def sqlite_storage(conn: Connection) -> Storage:
    """A `Storage` around an open SQLite connection (tests and benchmarks)."""
    return Storage(sqlite=conn)

"""The database a process works on, whichever engine the config names: `open_storage`.

`[storage] url` unset or `sqlite:///…`: one SQLite file (`core.db`), the default for one
machine. `postgresql://…`: a PostgreSQL pool (`core.pg_db`) that bot processes and reflector
workers on many machines share. Each package builds its own stores from a `Storage`
(`core.stores`, `memory.stores`, `reflector.stores`), so the engine is chosen once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from core.config import StorageConfig
from core.db import Connection, check_file, connect
from core.errors import StorageError
from core.pg_db import PgDatabase


@dataclass
class Storage:
    """One process's open database: exactly one of `sqlite` and `postgres` is set."""

    sqlite: Connection | None = None
    postgres: PgDatabase | None = None

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
        if self.postgres is not None:
            info = self.postgres.info
            return f"{info.display_url} (PostgreSQL {info.server_version})"
        info_sqlite = self.sqlite_conn.info
        return f"{info_sqlite.path} (SQLite {info_sqlite.sqlite_version})"

    def check_file(self) -> None:
        """SQLite: raise `DatabaseGone` when the database file was deleted or replaced
        under this process. PostgreSQL: nothing to check (the server owns the files)."""
        if self.sqlite is not None:
            check_file(self.sqlite)

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

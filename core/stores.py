"""The core's stores for a `Storage`: SQLite or PostgreSQL implementations of the
`core.store` Protocols."""

from __future__ import annotations

from pathlib import Path

from core.file_store import DirectoryFileStore, FileStore
from core.storage import Storage
from core.store import DeliveryStore, SessionStore


def session_store(storage: Storage) -> SessionStore:
    if storage.postgres is not None:
        from core.pg_store import PgSessionStore

        return PgSessionStore(storage.postgres)
    from core.sqlite_store import SqliteSessionStore

    return SqliteSessionStore(storage.sqlite_conn)


def delivery_store(storage: Storage) -> DeliveryStore:
    if storage.postgres is not None:
        from core.pg_delivery_store import PgDeliveryStore

        return PgDeliveryStore(storage.postgres)
    from core.sqlite_delivery_store import SqliteDeliveryStore

    return SqliteDeliveryStore(storage.sqlite_conn)


def file_store(storage: Storage, data_dir: Path) -> FileStore:
    """The chats' files: under `data_dir` on SQLite, in the database on PostgreSQL."""
    if storage.postgres is not None:
        from core.pg_file_store import PgFileStore

        return PgFileStore(storage.postgres)
    return DirectoryFileStore(data_dir)

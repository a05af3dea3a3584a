"""The core's stores for a `Storage`: one implementation of each `core.storage.store` Protocol over
its `Database`; only where files live depends on the engine."""

from __future__ import annotations

from pathlib import Path

from core.storage.delivery_store import DatabaseDeliveryStore
from core.storage.engine import Storage
from core.storage.file_store import DatabaseFileStore, DirectoryFileStore, FileStore
from core.storage.live_turn_store import DatabaseLiveTurnStore
from core.storage.session_store import DatabaseSessionStore
from core.storage.store import DeliveryStore, SessionStore


def session_store(storage: Storage) -> SessionStore:
    return DatabaseSessionStore(storage.database)


def delivery_store(storage: Storage) -> DeliveryStore:
    return DatabaseDeliveryStore(storage.database)


def live_turn_store(storage: Storage) -> DatabaseLiveTurnStore:
    return DatabaseLiveTurnStore(storage.database)


def file_store(storage: Storage, data_dir: Path) -> FileStore:
    """The chats' files: under `data_dir` on SQLite (an operator reads and edits them), in
    the database on PostgreSQL (every machine sees them)."""
    if storage.database.dialect.remote:
        return DatabaseFileStore(storage.database)
    return DirectoryFileStore(data_dir)

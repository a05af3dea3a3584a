"""The dashboard's read store for a `Storage` (SQLite or PostgreSQL)."""

from __future__ import annotations

from bots.web.store import DashboardStore
from core.storage import Storage


def dashboard_store(storage: Storage) -> DashboardStore:
    if storage.postgres is not None:
        from bots.web.pg_store import PgDashboardStore

        return PgDashboardStore(storage.postgres)
    from bots.web.sqlite_store import SqliteDashboardStore

    return SqliteDashboardStore(storage.sqlite_conn)

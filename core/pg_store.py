"""PostgreSQL `SessionStore` (placeholder until the PostgreSQL stores land)."""

from __future__ import annotations

from typing import Any

from core.errors import StorageError


class PgSessionStore:
    def __init__(self, db: Any) -> None:
        raise StorageError("the PostgreSQL session store is not built yet")

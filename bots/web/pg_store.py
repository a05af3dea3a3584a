"""PostgreSQL `DashboardStore` (placeholder until it lands)."""

from __future__ import annotations

from typing import Any

from core.errors import StorageError


class PgDashboardStore:
    def __init__(self, db: Any) -> None:
        raise StorageError("the dashboard does not read PostgreSQL yet")

"""Shared helpers of the core tests: a runtime with only the built-ins (no embedder to load)."""

from __future__ import annotations

from bots.runtime import Runtime, build_runtime
from core import default_plugin
from core.config import Config
from core.pg_db import PgDatabase
from migrations import all_migrations, migrate_postgresql


def light_runtime(config: Config) -> Runtime:
    """Like `build_runtime()` but with the built-ins only, so tests see only the core's requests."""
    return build_runtime(config, plugins=[default_plugin])


def stored(runtime: Runtime, chat_id: str) -> list[tuple[str, str]]:
    """(role, content) of the terminal chat's current session, oldest first."""
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None
    return [(m.role, m.content) for m in runtime.store.history(chat.id)]


def pg_migrations_missing() -> list[str]:
    """Migrations without a PostgreSQL version yet (other packages' stores still to come)."""
    return [m.name for m in all_migrations() if m.apply_postgresql is None]


def prepare_core_postgres(url: str) -> str:
    """`url`'s empty database with every migration that has a PostgreSQL version applied, and
    the others recorded as done (their packages' tables are absent), so `open_storage` opens
    it for the core's stores while the memory and reflector versions are still to come.
    Once every migration has one, this changes nothing: `open_storage` migrates as usual."""
    missing = pg_migrations_missing()
    if not missing:
        return url
    db = PgDatabase(url, migrate=False)
    try:
        with db.transaction() as conn:
            migrate_postgresql(conn, upto=0)  # mnemo_now() and _migrations
            for migration in all_migrations():
                if migration.apply_postgresql is not None:
                    migration.apply_postgresql(conn)
                conn.execute("INSERT INTO _migrations (name) VALUES (%s)", (migration.name,))
    finally:
        db.close()
    return url

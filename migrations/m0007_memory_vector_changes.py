"""The memory change log also records a new vector: a change of `embedding_model`.

A memory embedded after it was stored (at model load, by `mnemo memory reindex`, by the
reflector's upkeep) changes no column m0006 watches, yet processes that keep a chat's
vectors in memory (`memory.vector_cache`) must see it.

PostgreSQL: a trigger on the same PL/pgSQL function as m0006's (it logs NEW, under the
change log's advisory lock), fired only when the model really changed.
"""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    """CREATE TRIGGER memory_changes_embedding
        AFTER UPDATE OF embedding_model ON memories
        WHEN OLD.embedding_model IS NOT NEW.embedding_model BEGIN
        INSERT INTO memory_changes (scope, memory_id) VALUES (coalesce(NEW.chat_id, 0), NEW.id);
    END""",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)


POSTGRESQL = [
    """CREATE TRIGGER memory_changes_embedding
        AFTER UPDATE OF embedding_model ON memories FOR EACH ROW
        WHEN (OLD.embedding_model IS DISTINCT FROM NEW.embedding_model)
        EXECUTE FUNCTION memory_changes_log()""",
]


def apply_postgresql(conn: Any) -> None:
    for statement in POSTGRESQL:
        conn.execute(statement)

"""A stored full-text vector of each memory on PostgreSQL: `memories.text_search`.

m0002's lookup index was GIN over the expression `to_tsvector('english', content || ' ' ||
context)`: it finds the matching rows, but ranking them (`ts_rank`) recomputed the
expression for every row an OR of the query's words matched (1.2 s at 100,000 memories,
`mnemo bench memory --test-postgres`). Now the vector is a generated column, computed
once when a row is written, with its own GIN index; the expression index goes. Adding the
column rewrites the table once (seconds at 100,000 memories).

SQLite: nothing. Its lookup is FTS5 (`memories_fts`), which keeps its own index and ranks
from it.
"""

from __future__ import annotations

from typing import Any

TEXT_SEARCH_COLUMN = "text_search"
TEXT_SEARCH_SQL = "to_tsvector('english'::regconfig, content || ' ' || context)"


def apply(conn: Any) -> None:
    """SQLite: FTS5 already ranks from its own index."""


def apply_postgresql(conn: Any) -> None:
    conn.execute(
        f"ALTER TABLE memories ADD COLUMN {TEXT_SEARCH_COLUMN} tsvector"
        f" GENERATED ALWAYS AS ({TEXT_SEARCH_SQL}) STORED"
    )
    conn.execute(
        f"CREATE INDEX memories_text_search_stored ON memories USING GIN ({TEXT_SEARCH_COLUMN})"
    )
    conn.execute("DROP INDEX memories_text_search")

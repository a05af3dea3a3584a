"""Persisted ranking data: `memory_rank_snapshots`, one row per chat scope and kind.

A chat's keyword posting lists and its vectors (`memory.keyword_cache`,
`memory.vector_cache`) are saved as one blob each, with the change-log positions they are
current to (`chat_seq` for the chat's own memories, `shared_seq` for the global ones), so a
new process loads them and applies only the changes logged since, instead of building them
from every memory (`memory.rank_snapshots`). `model` names the embedding model of a vector
snapshot ('' for keywords). Derived and rebuildable: forgetting a memory drops the
snapshots that held it. One SQL text for both engines; only the byte type differs.
"""

from __future__ import annotations

from typing import Any

TABLE = """CREATE TABLE memory_rank_snapshots (
    scope BIGINT NOT NULL,
    kind TEXT NOT NULL,
    chat_seq BIGINT NOT NULL,
    shared_seq BIGINT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    data {blob} NOT NULL,
    PRIMARY KEY (scope, kind)
)"""


def apply(conn: Any) -> None:
    conn.execute(TABLE.format(blob="BLOB"))


def apply_postgresql(conn: Any) -> None:
    conn.execute(TABLE.format(blob="BYTEA"))
    # Stored as is: the blobs are numpy arrays that do not compress, and trying costs time.
    conn.execute("ALTER TABLE memory_rank_snapshots ALTER COLUMN data SET STORAGE EXTERNAL")

"""A log of changes to memories, per scope, written by triggers: `memory_changes`.

Processes that keep derived data of a chat's memories in memory (the keyword posting lists
of `memory.keyword_cache`) read the log from where they last were, so they update only the
memories that changed, whichever process or connection changed them. Scope 0 stands for
global memories (`chat_id IS NULL`); a row of scope -1 (no memory) means "anything may have
changed": the log was pruned, or the index rebuilt. `seq` only grows (AUTOINCREMENT).
Only changes that alter what ranking sees are logged: a new, deleted or moved memory, new
content or context, archiving and expiry; `touch()` (last seen, confidence) is not.
"""

from __future__ import annotations

from typing import Any


def _log(row: str) -> str:
    return (
        "INSERT INTO memory_changes (scope, memory_id)"
        f" VALUES (coalesce({row}.chat_id, 0), {row}.id);"
    )


STATEMENTS = [
    """CREATE TABLE memory_changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        scope INTEGER NOT NULL,
        memory_id INTEGER
    )""",
    "CREATE INDEX memory_changes_scope ON memory_changes (scope, seq)",
    f"""CREATE TRIGGER memory_changes_insert AFTER INSERT ON memories BEGIN
        {_log("NEW")}
    END""",
    f"""CREATE TRIGGER memory_changes_delete AFTER DELETE ON memories BEGIN
        {_log("OLD")}
    END""",
    f"""CREATE TRIGGER memory_changes_update
        AFTER UPDATE OF chat_id, content, context, archived, expires_at ON memories BEGIN
        {_log("NEW")}
        INSERT INTO memory_changes (scope, memory_id)
            SELECT coalesce(OLD.chat_id, 0), OLD.id WHERE OLD.chat_id IS NOT NEW.chat_id;
    END""",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)

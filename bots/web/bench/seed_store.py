"""Bulk loading for `mnemo bench web`: a realistic history in seconds, with the timestamps
a bot in use for weeks would have written (the stores stamp rows with "now").

Only the benchmark's throwaway database is written here; chats, compactions, memories and
tombstones go through their own stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.storage.database import Database

MessageRow = tuple[int, str, str, str, str, int]  # chat, role, sender, content, at, tokens
UsageRow = tuple[int, str, str, int, int, int, str]  # chat, kind, model, in, out, ms, at
RunRow = tuple[int, str, str, int, int, int, int, str, int, str | None, str]


def load_messages(db: Database, rows: Sequence[MessageRow]) -> None:
    db.write_many(
        "INSERT INTO messages (chat_id, role, sender, content, created_at, token_estimate)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )


def load_usage(db: Database, rows: Sequence[UsageRow]) -> None:
    db.write_many(
        "INSERT INTO llm_usage (chat_id, kind, model, prompt_tokens, completion_tokens,"
        " latency_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def load_runs(db: Database, rows: Sequence[RunRow]) -> None:
    """(chat, started, finished, first id, last id, seen, added, model, ok, error, status)."""
    db.write_many(
        "INSERT INTO reflector_runs (chat_id, started_at, finished_at, first_message_id,"
        " last_message_id, messages_seen, memories_added, model, ok, error, status)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def backdate(db: Database, table: str, moments: Sequence[tuple[str, int]]) -> None:
    """Set `created_at` of rows of `memories` or `compactions` (moment, id)."""
    column: dict[str, Any] = {"memories": "memories", "compactions": "compactions"}
    db.write_many(f"UPDATE {column[table]} SET created_at = ? WHERE id = ?", moments)

"""The SQL of `note_changes` (who changed an AGENTS.md note file), one text for both
engines (`?` placeholders, run through the `Database` seam)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.store import NoteChange

_COLUMNS = (
    "chat_id, scope, action, via, sender_id, sender_name, message_id, user_message_id,"
    " chars_after, excerpt, reason"
)
RECORD = f"INSERT INTO note_changes ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
OF_CHAT = (
    f"SELECT {_COLUMNS}, id, changed_at FROM note_changes WHERE chat_id = ?"
    " ORDER BY id DESC LIMIT ?"
)


def record_params(change: NoteChange) -> tuple[Any, ...]:
    return (
        change.chat_id, change.scope, change.action, change.via, change.sender_id,
        change.sender_name, change.message_id, change.user_message_id, change.chars_after,
        change.excerpt, change.reason,
    )  # fmt: skip


def changes_from_rows(rows: Sequence[Sequence[Any]]) -> list[NoteChange]:
    return [
        NoteChange(
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            int(row[7]),
            int(row[8]),
            row[9],
            row[10],
            int(row[11]),
            str(row[12]),
        )  # fmt: skip
        for row in rows
    ]

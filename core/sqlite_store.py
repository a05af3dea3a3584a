"""SqliteSessionStore: the `SessionStore` on SQLite (chats, messages, sessions, usage)."""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

from core.api import Chat
from core.db import Connection, scrub_deleted, transaction
from core.model_profile import ModelProfile
from core.store import (
    COMPACTION_COLUMNS,
    CompactionRecord,
    NewMessage,
    Session,
    StoredMessage,
    compaction_from_row,
)
from core.store import chat_from_row as _chat
from core.store import message_from_row as _message
from core.tokens import Calibration, estimate_tokens

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_CHAT_COLUMNS = "id, channel, external_chat_id, title, kind"
_MESSAGE_COLUMNS = (
    "id, chat_id, role, sender, content, tool_calls, tool_call_id, created_at, token_estimate,"
    " context"
)


class SqliteSessionStore:
    """All reads and writes of chats, messages, sessions and usage on one connection."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def transaction(self) -> AbstractContextManager[Any]:
        return transaction(self.conn)

    # -- chats -------------------------------------------------------------------------

    def get_or_create_chat(
        self, channel: str, external_chat_id: str, title: str = "", kind: str = "private"
    ) -> Chat:
        with transaction(self.conn):
            self.conn.execute(
                "INSERT INTO chats (channel, external_chat_id, title, kind) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (channel, external_chat_id) DO UPDATE SET"
                " title = CASE WHEN excluded.title != '' THEN excluded.title ELSE title END",
                (channel, external_chat_id, title, kind),
            )
            row = self.conn.execute(
                f"SELECT {_CHAT_COLUMNS} FROM chats WHERE channel = ? AND external_chat_id = ?",
                (channel, external_chat_id),
            ).fetchone()
            self.conn.execute("INSERT OR IGNORE INTO sessions (chat_id) VALUES (?)", (row[0],))
        return _chat(row)

    def find_chat(self, channel: str, external_chat_id: str) -> Chat | None:
        row = self.conn.execute(
            f"SELECT {_CHAT_COLUMNS} FROM chats WHERE channel = ? AND external_chat_id = ?",
            (channel, external_chat_id),
        ).fetchone()
        return _chat(row) if row else None

    def chat_by_id(self, chat_id: int) -> Chat | None:
        row = self.conn.execute(
            f"SELECT {_CHAT_COLUMNS} FROM chats WHERE id = ?", (chat_id,)
        ).fetchone()
        return _chat(row) if row else None

    def list_chats(self, limit: int = 100) -> list[Chat]:
        rows = self.conn.execute(
            f"SELECT {_CHAT_COLUMNS} FROM chats ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return [_chat(row) for row in rows]

    def delete_chat(self, chat_id: int) -> int:
        with transaction(self.conn):
            # Usage rows hold token counts and timings, no text: kept, without the chat.
            self.conn.execute("UPDATE llm_usage SET chat_id = NULL WHERE chat_id = ?", (chat_id,))
            gone = self.conn.execute("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            self.conn.execute("DELETE FROM compactions WHERE chat_id = ?", (chat_id,))
            self.conn.execute("DELETE FROM sessions WHERE chat_id = ?", (chat_id,))
            self.conn.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
        return int(gone.rowcount)

    def scrub_deleted(self, tables: tuple[str, ...] = ()) -> None:
        scrub_deleted(self.conn)

    # -- messages ----------------------------------------------------------------------

    def append(self, chat_id: int, messages: list[NewMessage]) -> list[int]:
        ids: list[int] = []
        with transaction(self.conn):
            for message in messages:
                cursor = self.conn.execute(
                    "INSERT INTO messages (chat_id, role, sender, content, tool_calls,"
                    " tool_call_id, token_estimate) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        chat_id,
                        message.role,
                        message.sender,
                        message.content,
                        json.dumps(message.tool_calls) if message.tool_calls else None,
                        message.tool_call_id,
                        estimate_tokens(message.content)
                        + estimate_tokens(json.dumps(message.tool_calls or "")),
                    ),
                )
                ids.append(int(cursor.lastrowid))
        return ids

    def history(self, chat_id: int, *, after_id: int | None = None) -> list[StoredMessage]:
        start = self.session(chat_id).started_at_message_id if after_id is None else after_id
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ? AND id > ? ORDER BY id",
            (chat_id, start),
        ).fetchall()
        return [_message(row) for row in rows]

    def messages_between(self, chat_id: int, after_id: int, limit: int) -> list[StoredMessage]:
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ? AND id > ?"
            " ORDER BY id LIMIT ?",
            (chat_id, after_id, limit),
        ).fetchall()
        return [_message(row) for row in rows]

    def count_messages(self, chat_id: int | None = None) -> int:
        if chat_id is None:
            return int(self.conn.execute("SELECT count(*) FROM messages").fetchone()[0])
        row = self.conn.execute("SELECT count(*) FROM messages WHERE chat_id = ?", (chat_id,))
        return int(row.fetchone()[0])

    def newest_message_id(self, chat_id: int) -> int:
        row = self.conn.execute(
            "SELECT coalesce(max(id), 0) FROM messages WHERE chat_id = ?", (chat_id,)
        ).fetchone()
        return int(row[0])

    def keep_context(self, message_id: int, context: str) -> None:
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE messages SET context = ? WHERE id = ? AND context IS NULL",
                (context, message_id),
            )

    # -- sessions and compactions ------------------------------------------------------

    def session(self, chat_id: int) -> Session:
        row = self.conn.execute(
            "SELECT chat_id, summary, compaction_count, started_at_message_id, updated_at"
            " FROM sessions WHERE chat_id = ?",
            (chat_id,),
        ).fetchone()
        if row is None:
            self.conn.execute("INSERT OR IGNORE INTO sessions (chat_id) VALUES (?)", (chat_id,))
            return self.session(chat_id)
        return Session(row[0], row[1], row[2], row[3], row[4])

    def reset_session(self, chat_id: int) -> None:
        with transaction(self.conn):
            last = self.newest_message_id(chat_id)
            self.conn.execute(
                "UPDATE sessions SET summary = NULL, started_at_message_id = ?,"
                f" updated_at = {_NOW} WHERE chat_id = ?",
                (last, chat_id),
            )

    def record_compaction(self, chat_id: int, compaction: CompactionRecord) -> int:
        first, last = compaction.first_message_id, compaction.last_message_id
        with transaction(self.conn):
            cursor = self.conn.execute(
                "INSERT INTO compactions (chat_id, trigger, status, first_message_id,"
                " last_message_id, messages_compacted, tokens_before, tokens_after,"
                " summary_calls, archive_path, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (chat_id, compaction.trigger, compaction.status, first, last,
                 compaction.messages_compacted, compaction.tokens_before,
                 compaction.tokens_after, compaction.summary_calls, compaction.archive_path,
                 compaction.error[:500]),
            )  # fmt: skip
            compaction_id = int(cursor.lastrowid)
            self.conn.execute(
                "UPDATE messages SET compaction_id = ? WHERE chat_id = ? AND id BETWEEN ? AND ?"
                " AND compaction_id IS NULL",
                (compaction_id, chat_id, first, last),
            )
            self.conn.execute(
                "UPDATE sessions SET summary = coalesce(?, summary),"
                " compaction_count = compaction_count + 1, started_at_message_id = ?,"
                f" updated_at = {_NOW} WHERE chat_id = ?",
                (compaction.summary, last, chat_id),
            )
        return compaction_id

    def compaction_totals(self, chat_id: int) -> tuple[int, int]:
        count, saved = self.conn.execute(
            "SELECT count(*), coalesce(sum(max(tokens_before - tokens_after, 0)), 0)"
            " FROM compactions WHERE chat_id = ?",
            (chat_id,),
        ).fetchone()
        return int(count), int(saved)

    def compactions(self, chat_id: int) -> list[CompactionRecord]:
        rows = self.conn.execute(
            f"SELECT {COMPACTION_COLUMNS} FROM compactions WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        ).fetchall()
        return [compaction_from_row(row) for row in rows]

    def archive_paths(self) -> list[str]:
        rows = self.conn.execute("SELECT archive_path FROM compactions ORDER BY id")
        return [str(row[0]) for row in rows]

    def compacted_message_ids(self) -> set[int]:
        rows = self.conn.execute("SELECT id FROM messages WHERE compaction_id IS NOT NULL")
        return {int(row[0]) for row in rows}

    # -- model usage and calibration ---------------------------------------------------

    def record_usage(
        self,
        chat_id: int | None,
        kind: str,
        model: str,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        latency_ms: int,
        ok: bool = True,
    ) -> None:
        self.conn.execute(
            "INSERT INTO llm_usage (chat_id, kind, model, prompt_tokens, completion_tokens,"
            " latency_ms, ok) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (chat_id, kind, model, prompt_tokens, completion_tokens, latency_ms, int(ok)),
        )

    def load_calibration(self, model: str) -> Calibration | None:
        row = self.conn.execute(
            "SELECT chars_per_token, samples, last_ratio FROM context_calibration WHERE model = ?",
            (model,),
        ).fetchone()
        return Calibration(model, float(row[0]), int(row[1]), row[2]) if row else None

    def save_calibration(self, calibration: Calibration) -> None:
        self.conn.execute(
            "INSERT INTO context_calibration (model, chars_per_token, samples, last_ratio)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (model) DO UPDATE SET"
            " chars_per_token = excluded.chars_per_token, samples = excluded.samples,"
            f" last_ratio = excluded.last_ratio, updated_at = {_NOW}",
            (
                calibration.model,
                calibration.chars_per_token,
                calibration.samples,
                calibration.last_ratio,
            ),
        )

    # -- model profiles ------------------------------------------------------------------

    def load_model_profile(self, model: str) -> ModelProfile | None:
        row = self.conn.execute(
            "SELECT facts FROM model_profiles WHERE model = ?", (model,)
        ).fetchone()
        return ModelProfile.from_facts(model, json.loads(row[0])) if row else None

    def save_model_profile(self, profile: ModelProfile) -> None:
        self.conn.execute(
            "INSERT INTO model_profiles (model, facts) VALUES (?, ?) ON CONFLICT (model)"
            f" DO UPDATE SET facts = excluded.facts, updated_at = {_NOW}",
            (profile.model, json.dumps(profile.facts(), sort_keys=True)),
        )

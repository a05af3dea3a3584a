"""DatabaseSessionStore: the `SessionStore` on either engine (chats, messages, sessions,
compactions, usage, model calibration and profiles), one SQL text over `core.storage.database`.

A method is one statement where it can be (`RETURNING` instead of a read after a write, a
turn's messages in one batch), since on PostgreSQL several bot processes share the server
and a turn's CPU is mostly the statements it sends. A store called inside a unit of work
(the turn's, the delivery store's) joins it, so they commit together.
"""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager

from core.api import Chat
from core.model.profile import ModelProfile
from core.model.tokens import Calibration, estimate_tokens
from core.storage.database import Database
from core.storage.store import (
    COMPACTION_COLUMNS,
    CompactionRecord,
    NewMessage,
    Session,
    StoredMessage,
    compaction_from_row,
)
from core.storage.store import chat_from_row as _chat
from core.storage.store import message_from_row as _message

_CHAT_COLUMNS = "id, channel, external_chat_id, title, kind"
_MESSAGE_COLUMNS = (
    "id, chat_id, role, sender, content, tool_calls, tool_call_id, created_at, token_estimate,"
    " context"
)
_SESSION_COLUMNS = "chat_id, summary, compaction_count, started_at_message_id, updated_at"
_SESSION_START = "coalesce((SELECT started_at_message_id FROM sessions WHERE chat_id = ?), 0)"

MODEL_FACTS_TTL_S = 2.0


class DatabaseSessionStore:
    """All reads and writes of chats, messages, sessions and usage on a `Database`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        # On a server a turn reads the model's calibration and profile several times, and
        # they change slowly: kept for a moment rather than a round trip each (another
        # process's save is seen within `MODEL_FACTS_TTL_S`; this process's own at once).
        self._facts_ttl_s = MODEL_FACTS_TTL_S if db.dialect.remote else 0.0
        self._model_facts: dict[tuple[str, str], tuple[float, object]] = {}

    def _remembered(self, kind: str, model: str) -> tuple[bool, object]:
        found = self._model_facts.get((kind, model))
        if found is not None and time.monotonic() - found[0] < self._facts_ttl_s:
            return True, found[1]
        return False, None

    def _remember(self, kind: str, model: str, value: object) -> None:
        if self._facts_ttl_s:
            self._model_facts[(kind, model)] = (time.monotonic(), value)

    def transaction(self) -> AbstractContextManager[None]:
        return self.db.transaction()

    # -- chats -------------------------------------------------------------------------

    def get_or_create_chat(
        self, channel: str, external_chat_id: str, title: str = "", kind: str = "private"
    ) -> Chat:
        found = self.find_chat(channel, external_chat_id)
        if found is not None and (not title or title == found.title):
            return found  # the common case: one read, no row written
        with self.db.transaction():
            row = self.db.read_one(
                "INSERT INTO chats (channel, external_chat_id, title, kind) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (channel, external_chat_id) DO UPDATE SET"
                " title = CASE WHEN excluded.title != '' THEN excluded.title ELSE chats.title END"
                f" RETURNING {_CHAT_COLUMNS}",
                (channel, external_chat_id, title, kind),
            )
            assert row is not None  # ON CONFLICT DO UPDATE returns the row either way
            self.db.write(
                "INSERT INTO sessions (chat_id) VALUES (?) ON CONFLICT (chat_id) DO NOTHING",
                (row[0],),
            )
        return _chat(row)

    def find_chat(self, channel: str, external_chat_id: str) -> Chat | None:
        row = self.db.read_one(
            f"SELECT {_CHAT_COLUMNS} FROM chats WHERE channel = ? AND external_chat_id = ?",
            (channel, external_chat_id),
        )
        return _chat(row) if row else None

    def chat_by_id(self, chat_id: int) -> Chat | None:
        row = self.db.read_one(f"SELECT {_CHAT_COLUMNS} FROM chats WHERE id = ?", (chat_id,))
        return _chat(row) if row else None

    def list_chats(self, limit: int = 100) -> list[Chat]:
        rows = self.db.read(f"SELECT {_CHAT_COLUMNS} FROM chats ORDER BY id LIMIT ?", (limit,))
        return [_chat(row) for row in rows]

    def delete_chat(self, chat_id: int) -> int:
        with self.db.transaction():
            # Usage rows hold token counts and timings, no text: kept, without the chat.
            self.db.write("UPDATE llm_usage SET chat_id = NULL WHERE chat_id = ?", (chat_id,))
            gone = self.db.write("DELETE FROM messages WHERE chat_id = ?", (chat_id,))
            self.db.write("DELETE FROM compactions WHERE chat_id = ?", (chat_id,))
            self.db.write("DELETE FROM sessions WHERE chat_id = ?", (chat_id,))
            self.db.write("DELETE FROM chats WHERE id = ?", (chat_id,))
        return gone

    def scrub_deleted(self, tables: tuple[str, ...] = ()) -> None:
        self.db.scrub_deleted(tables)

    # -- messages ----------------------------------------------------------------------

    def append(self, chat_id: int, messages: list[NewMessage]) -> list[int]:
        rows = [
            (
                chat_id,
                message.role,
                message.sender,
                message.content,
                json.dumps(message.tool_calls) if message.tool_calls else None,
                message.tool_call_id,
                estimate_tokens(message.content)
                + estimate_tokens(json.dumps(message.tool_calls or "")),
                message.created_at,
            )
            for message in messages
        ]
        returned = self.db.write_returning(
            "INSERT INTO messages (chat_id, role, sender, content, tool_calls,"
            " tool_call_id, token_estimate, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, coalesce(nullif(?, ''), mnemo_now())) RETURNING id",
            rows,
        )
        return [int(row[0]) for row in returned]

    def history(self, chat_id: int, *, after_id: int | None = None) -> list[StoredMessage]:
        if after_id is None:
            rows = self.db.read(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ?"
                f" AND id > {_SESSION_START} ORDER BY id",
                (chat_id, chat_id),
            )
        else:
            rows = self.db.read(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ? AND id > ? ORDER BY id",
                (chat_id, after_id),
            )
        return [_message(row) for row in rows]

    def messages_between(self, chat_id: int, after_id: int, limit: int) -> list[StoredMessage]:
        rows = self.db.read(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE chat_id = ? AND id > ?"
            " ORDER BY id LIMIT ?",
            (chat_id, after_id, limit),
        )
        return [_message(row) for row in rows]

    def count_messages(self, chat_id: int | None = None) -> int:
        if chat_id is None:
            row = self.db.read_one("SELECT count(*) FROM messages")
        else:
            row = self.db.read_one("SELECT count(*) FROM messages WHERE chat_id = ?", (chat_id,))
        return int(row[0]) if row else 0

    def newest_message_id(self, chat_id: int) -> int:
        row = self.db.read_one(
            "SELECT coalesce(max(id), 0) FROM messages WHERE chat_id = ?", (chat_id,)
        )
        return int(row[0]) if row else 0

    def keep_context(self, message_id: int, context: str) -> None:
        self.db.write(
            "UPDATE messages SET context = ? WHERE id = ? AND context IS NULL",
            (context, message_id),
        )

    # -- sessions and compactions ------------------------------------------------------

    def session(self, chat_id: int) -> Session:
        row = self.db.read_one(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE chat_id = ?", (chat_id,)
        )
        if row is None:
            row = self.db.read_one(
                "INSERT INTO sessions (chat_id) VALUES (?) ON CONFLICT (chat_id)"
                f" DO UPDATE SET chat_id = excluded.chat_id RETURNING {_SESSION_COLUMNS}",
                (chat_id,),
            )
            assert row is not None
        return Session(row[0], row[1], row[2], row[3], row[4])

    def reset_session(self, chat_id: int) -> None:
        self.db.write(
            "UPDATE sessions SET summary = NULL, updated_at = mnemo_now(),"
            " started_at_message_id ="
            " (SELECT coalesce(max(id), 0) FROM messages WHERE chat_id = ?)"
            " WHERE chat_id = ?",
            (chat_id, chat_id),
        )

    def record_compaction(self, chat_id: int, compaction: CompactionRecord) -> int:
        first, last = compaction.first_message_id, compaction.last_message_id
        with self.db.transaction():
            row = self.db.read_one(
                "INSERT INTO compactions (chat_id, trigger, status, first_message_id,"
                " last_message_id, messages_compacted, tokens_before, tokens_after,"
                " summary_calls, archive_path, error)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                (chat_id, compaction.trigger, compaction.status, first, last,
                 compaction.messages_compacted, compaction.tokens_before,
                 compaction.tokens_after, compaction.summary_calls, compaction.archive_path,
                 compaction.error[:500]),
            )  # fmt: skip
            assert row is not None
            compaction_id = int(row[0])
            self.db.write(
                "UPDATE messages SET compaction_id = ? WHERE chat_id = ?"
                " AND id BETWEEN ? AND ? AND compaction_id IS NULL",
                (compaction_id, chat_id, first, last),
            )
            self.db.write(
                "UPDATE sessions SET summary = coalesce(?, summary),"
                " compaction_count = compaction_count + 1, started_at_message_id = ?,"
                " updated_at = mnemo_now() WHERE chat_id = ?",
                (compaction.summary, last, chat_id),
            )
        return compaction_id

    def compaction_totals(self, chat_id: int) -> tuple[int, int]:
        row = self.db.read_one(
            "SELECT count(*), coalesce(sum(CASE WHEN tokens_before > tokens_after"
            " THEN tokens_before - tokens_after ELSE 0 END), 0)"
            " FROM compactions WHERE chat_id = ?",
            (chat_id,),
        )
        assert row is not None
        return int(row[0]), int(row[1])

    def peak_prompt_tokens(self, chat_id: int, kind: str) -> int:
        rows = self.db.read(
            "SELECT coalesce(max(prompt_tokens), 0) FROM llm_usage"
            " WHERE chat_id = ? AND kind = ? AND ok = 1",
            (chat_id, kind),
        )
        return int(rows[0][0]) if rows else 0

    def compactions(self, chat_id: int) -> list[CompactionRecord]:
        rows = self.db.read(
            f"SELECT {COMPACTION_COLUMNS} FROM compactions WHERE chat_id = ? ORDER BY id",
            (chat_id,),
        )
        return [compaction_from_row(row) for row in rows]

    def archive_paths(self) -> list[str]:
        rows = self.db.read("SELECT archive_path FROM compactions ORDER BY id")
        return [str(row[0]) for row in rows]

    def compacted_message_ids(self) -> set[int]:
        rows = self.db.read("SELECT id FROM messages WHERE compaction_id IS NOT NULL")
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
        self.db.write(
            "INSERT INTO llm_usage (chat_id, kind, model, prompt_tokens, completion_tokens,"
            " latency_ms, ok) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (chat_id, kind, model, prompt_tokens, completion_tokens, latency_ms, int(ok)),
        )

    def load_calibration(self, model: str) -> Calibration | None:
        known, value = self._remembered("calibration", model)
        if known:
            return value if isinstance(value, Calibration) else None
        row = self.db.read_one(
            "SELECT chars_per_token, samples, last_ratio FROM context_calibration WHERE model = ?",
            (model,),
        )
        calibration = Calibration(model, float(row[0]), int(row[1]), row[2]) if row else None
        self._remember("calibration", model, calibration)
        return calibration

    def save_calibration(self, calibration: Calibration) -> None:
        self._model_facts.pop(("calibration", calibration.model), None)
        self.db.write(
            "INSERT INTO context_calibration (model, chars_per_token, samples, last_ratio)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (model) DO UPDATE SET"
            " chars_per_token = excluded.chars_per_token, samples = excluded.samples,"
            " last_ratio = excluded.last_ratio, updated_at = mnemo_now()",
            (
                calibration.model,
                calibration.chars_per_token,
                calibration.samples,
                calibration.last_ratio,
            ),
        )

    # -- model profiles ------------------------------------------------------------------

    def load_model_profile(self, model: str) -> ModelProfile | None:
        known, value = self._remembered("profile", model)
        if known:
            return value if isinstance(value, ModelProfile) else None
        row = self.db.read_one("SELECT facts FROM model_profiles WHERE model = ?", (model,))
        profile = ModelProfile.from_facts(model, json.loads(row[0])) if row else None
        self._remember("profile", model, profile)
        return profile

    def save_model_profile(self, profile: ModelProfile) -> None:
        self._model_facts.pop(("profile", profile.model), None)
        self.db.write(
            "INSERT INTO model_profiles (model, facts) VALUES (?, ?) ON CONFLICT (model)"
            " DO UPDATE SET facts = excluded.facts, updated_at = mnemo_now()",
            (profile.model, json.dumps(profile.facts(), sort_keys=True)),
        )

"""Test helpers for running the reflector's tests on both engines: raw SQL for assertions
(`?` placeholders, through the `Database` seam) and a chat with messages."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from core.storage.engine import Storage


def query(storage: Storage, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row of `sql` on either engine."""
    return storage.database.read(sql, params)


def execute(storage: Storage, sql: str, params: Sequence[Any] = ()) -> None:
    """One committed write on either engine."""
    storage.database.write(sql, params)


def transaction(storage: Storage) -> AbstractContextManager[Any]:
    """One unit of work on either engine."""
    return storage.database.transaction()


def chat_with_messages(storage: Storage, name: str, count: int) -> tuple[int, list[int]]:
    """A terminal chat with `count` user messages (written as rows: the tests of the
    reflector's own stores need no session store)."""
    [(chat_id,)] = query(
        storage,
        "INSERT INTO chats (channel, external_chat_id) VALUES ('terminal', ?) RETURNING id",
        (name,),
    )
    ids = [
        query(
            storage,
            "INSERT INTO messages (chat_id, role, sender, content) VALUES (?, 'user', 'u', ?)"
            " RETURNING id",
            (chat_id, f"m{i}"),
        )[0][0]
        for i in range(count)
    ]
    return int(chat_id), [int(i) for i in ids]

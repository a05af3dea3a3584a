"""Test helpers for running the reflector's tests on both engines: raw SQL for assertions
(`?` placeholders, through the `Database` seam), a chat with messages, and processes that
contend for the same rows."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from core.config import StorageConfig
from core.storage.engine import Storage, open_storage


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


def as_processes(url: str, count: int, body: Callable[[Storage, int], None]) -> None:
    """Run `body(storage, number)` for numbers 0..count-1 at once, each in a thread with a
    connection (or pool) of its own to the database at `url`, as separate processes would;
    they start together at a barrier. Re-raises the first exception any of them raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def process(number: int) -> None:
        storage = open_storage(StorageConfig(url=url))
        try:
            barrier.wait()
            body(storage, number)
        except BaseException as exc:
            errors.append(exc)
        finally:
            storage.close()

    threads = [threading.Thread(target=process, args=(number,)) for number in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]

"""The delivery store and turn leases: inbound messages once per platform id, replies kept
until delivered, a chat's turn held by one owner at a time across connections (two SQLite
connections, or two PostgreSQL pools: processes on different machines). Every test but the
SQLite upgrade runs on both engines (`storage`, tests/core/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from core.api import Inbound, Outbound
from core.config import StorageConfig
from core.errors import LeaseLost
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.delivery_store import DatabaseDeliveryStore
from core.storage.engine import Storage, open_storage
from core.storage.session_store import DatabaseSessionStore
from core.storage.store import DeliveryStore, NewMessage, SessionStore
from core.storage.stores import delivery_store, session_store
from core.turn.lease import TurnLeases, owner_is_gone
from migrations import migrate


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def inbound(text: str, message_id: str = "") -> Inbound:
    return Inbound("telegram", "5", text, sender_id="5", message_id=message_id)


def stores(storage: Storage) -> tuple[SessionStore, DeliveryStore]:
    return session_store(storage), delivery_store(storage)


@contextmanager
def two_processes(url: str) -> Iterator[tuple[Storage, Storage]]:
    """The database opened twice: two SQLite connections, or two PostgreSQL pools."""
    one = open_storage(StorageConfig(url=url))
    two = open_storage(StorageConfig(url=url))
    try:
        yield one, two
    finally:
        one.close()
        two.close()


def test_a_platform_message_is_stored_once_per_chat(storage: Storage) -> None:
    sessions, store = stores(storage)
    chat = sessions.get_or_create_chat("telegram", "5")
    other = sessions.get_or_create_chat("telegram", "6")
    first = store.receive(chat, inbound("hi", "10"))
    assert first is not None and store.next_pending(chat.id) == first
    assert store.receive(chat, inbound("hi", "10")) is None  # a replay
    assert store.receive(other, inbound("hi", "10")) is not None  # another chat's id 10
    assert store.receive(chat, inbound("no id")) is not None  # without ids: no dedupe
    assert store.receive(chat, inbound("no id")) is not None
    assert store.delivery_totals("telegram").received == 4
    assert store.delivery_totals("discord").received == 0


def test_a_replay_inside_a_turns_transaction_leaves_the_transaction_usable(
    storage: Storage,
) -> None:
    """PostgreSQL aborts a transaction at a failed statement: a replay must not be one."""
    sessions, store = stores(storage)
    chat = sessions.get_or_create_chat("telegram", "5")
    with sessions.transaction():
        assert store.receive(chat, inbound("hi", "10")) is not None
        assert store.receive(chat, inbound("hi", "10")) is None
        sessions.append(chat.id, [NewMessage("user", "still works")])
    assert [m.content for m in sessions.history(chat.id)] == ["still works"]


def test_a_reply_is_kept_until_delivered(storage: Storage) -> None:
    sessions, store = stores(storage)
    chat = sessions.get_or_create_chat("telegram", "5")
    message = store.receive(chat, inbound("hi", "10"))
    quiet = store.receive(chat, inbound("not for the bot", "11"))
    assert message is not None and quiet is not None
    assert store.chats_awaiting(["telegram"], max_attempts=3) == [chat.id]
    reply = store.finish(message.id, Outbound("telegram", "5", "hello", reply_to="10"))
    assert store.finish(quiet.id, None) is None
    with pytest.raises(LeaseLost):
        store.finish(message.id, None)  # answered already (by another process)
    assert reply is not None and store.undelivered(chat.id, max_attempts=3) == [reply]
    store.record_failed_attempt(reply.id, "ConnectionError: down")
    assert store.undelivered(chat.id, max_attempts=1) == []  # given up after one attempt
    store.mark_delivered(reply.id)
    assert store.undelivered(chat.id, max_attempts=3) == []
    assert store.chats_awaiting(["telegram"], max_attempts=3) == []
    totals = store.delivery_totals()
    assert (totals.answered, totals.recorded, totals.pending) == (1, 1, 0)
    assert (totals.replies, totals.delivered, totals.failed_attempts) == (1, 1, 1)


def test_a_chat_turn_has_one_owner_until_released_or_expired(storage_url: str) -> None:
    clock = Clock()
    with two_processes(storage_url) as (one, two):
        chat = session_store(one).get_or_create_chat("telegram", "5")
        first = TurnLeases(delivery_store(one), lease_s=10, clock=clock)
        second = TurnLeases(delivery_store(two), lease_s=10, clock=clock)
        lease = first.try_claim(chat.id)
        assert lease is not None and first.try_claim(chat.id) is not None  # its own again
        assert second.try_claim(chat.id) is None
        assert delivery_store(two).turn_holder(chat.id) == lease
        delivery_store(one).release_turn(lease)
        assert delivery_store(two).turn_holder(chat.id) is None
        taken = second.try_claim(chat.id)
        assert taken is not None and first.try_claim(chat.id) is None
        assert not delivery_store(one).renew_turn(lease, clock.now + 10)  # not its own
        clock.now += 11  # the second owner stopped renewing (its process hangs or died)
        assert first.try_claim(chat.id) is not None
        assert not delivery_store(two).holds_turn(taken)
        assert not delivery_store(two).renew_turn(taken, clock.now + 10)


def test_a_takeover_waits_until_a_turn_that_checked_its_lease_has_committed(
    storage_url: str,
) -> None:
    """The lease check and the turn's writes commit together: another process whose claim
    arrives in between (the lease just expired) gets the chat only after that commit."""
    with two_processes(storage_url) as (one, two):
        sessions, deliveries = stores(one)
        chat = sessions.get_or_create_chat("telegram", "5")
        arrived = deliveries.receive(chat, inbound("hi", "1"))
        assert arrived is not None and deliveries.claim_turn(chat.id, "one", 100.0, now=0)
        claimed: list[bool] = []
        with sessions.transaction():
            lease = deliveries.turn_holder(chat.id)
            assert lease is not None and deliveries.holds_turn(lease)
            taker = threading.Thread(  # its clock says the lease has expired
                target=lambda: claimed.append(
                    delivery_store(two).claim_turn(chat.id, "two", 300.0, now=200.0)
                )
            )
            taker.start()
            time.sleep(0.5)
            assert claimed == []  # waiting for the turn's commit
            sessions.append(chat.id, [NewMessage("assistant", "the answer")])
            deliveries.finish(arrived.id, Outbound("telegram", "5", "the answer"))
        taker.join(10)
        assert claimed == [True]
        assert [m.content for m in sessions.history(chat.id)] == ["the answer"]
        assert deliveries.delivery_totals().answered == 1


def test_a_lease_left_by_a_process_that_is_gone_is_taken_over_at_once(
    storage: Storage,
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    host = socket.gethostname()
    dead_owner = f"{host}:{gone.stdout.strip()}:abc"
    live_owner = f"{host}:{os.getppid()}:abc"  # the process that started the tests
    assert owner_is_gone(dead_owner) and not owner_is_gone(live_owner)
    sessions, store = stores(storage)
    chat = sessions.get_or_create_chat("telegram", "5")
    other = sessions.get_or_create_chat("telegram", "6")
    far = 10**10
    assert store.claim_turn(chat.id, dead_owner, far, now=0)
    assert store.claim_turn(other.id, live_owner, far, now=0)
    leases = TurnLeases(store)
    assert leases.try_claim(chat.id) is not None  # no waiting for the expiry
    assert leases.try_claim(other.id) is None


async def test_a_held_lease_is_renewed_while_the_turn_runs(storage_url: str) -> None:
    with two_processes(storage_url) as (one, two):
        chat = session_store(one).get_or_create_chat("telegram", "5")
        first = TurnLeases(delivery_store(one), lease_s=0.2)
        second = TurnLeases(delivery_store(two), lease_s=0.2)
        lease = first.try_claim(chat.id)
        assert lease is not None
        async with first.held(lease):
            await asyncio.sleep(0.6)  # three lease lengths: renewed meanwhile
            assert second.try_claim(chat.id) is None
        assert second.try_claim(chat.id) is not None  # released on the way out


def test_an_upgraded_database_has_nothing_to_answer_again(tmp_path: Path) -> None:
    """SQLite only: PostgreSQL deployments start at this schema (no older ones exist)."""
    old = connect(tmp_path / "old.db", migrate=False)
    migrate(old, upto=10)
    chat = DatabaseSessionStore(SqliteDatabase(old)).get_or_create_chat("telegram", "5")
    DatabaseSessionStore(SqliteDatabase(old)).append(
        chat.id, [NewMessage("user", "an old question")]
    )
    old.close()
    upgraded = connect(tmp_path / "old.db")
    try:
        store = DatabaseDeliveryStore(SqliteDatabase(upgraded))
        assert store.chats_awaiting(["telegram"], max_attempts=3) == []
        assert store.receive(chat, inbound("a new one", "1")) is not None
        assert store.chats_awaiting(["telegram"], max_attempts=3) == [chat.id]
    finally:
        upgraded.close()


def test_a_stored_message_comes_back_with_every_field_it_arrived_with(
    storage: Storage,
) -> None:
    """A turn run from the inbox (after a wait or a restart) sees the same `Inbound` the
    channel made: a field added to `Inbound` but not stored fails here."""
    sessions, store = stores(storage)
    chat = sessions.get_or_create_chat("telegram", "-100", "Team", "group")
    arrived = Inbound(
        "telegram", "-100", "hello", sender_id="7", sender_name="Ann", chat_kind="group",
        chat_title="Team", respond=False, message_id="42", sender_is_admin=True,
        sent_at="2026-11-26T09:00:00.000Z",
    )  # fmt: skip
    defaults = Inbound("telegram", "-100", "hello")
    changed = [name for name in vars(arrived) if getattr(arrived, name) != getattr(defaults, name)]
    # Attachments never reach the inbox: `Agent.accept` keeps their bytes in the chat's
    # files and leaves a placeholder in the text (tests/core/test_media.py).
    kept_as_text = {"attachments"}
    assert sorted(changed) == sorted(
        set(vars(arrived)) - {"channel", "chat_id", "text"} - kept_as_text
    )
    stored = store.receive(chat, arrived)
    assert stored is not None and stored.inbound == arrived
    assert store.next_pending(chat.id) == stored

"""The delivery store and turn leases: inbound messages once per platform id, replies kept
until delivered, a chat's turn held by one owner at a time across connections."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.api import Inbound, Outbound
from core.db import Connection, connect
from core.errors import LeaseLost
from core.sqlite_delivery_store import SqliteDeliveryStore
from core.sqlite_store import SqliteSessionStore
from core.store import NewMessage
from core.turn_lease import TurnLeases, owner_is_gone
from migrations import migrate


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def inbound(text: str, message_id: str = "") -> Inbound:
    return Inbound("telegram", "5", text, sender_id="5", message_id=message_id)


def test_a_platform_message_is_stored_once_per_chat(conn: Connection) -> None:
    store = SqliteDeliveryStore(conn)
    chat = SqliteSessionStore(conn).get_or_create_chat("telegram", "5")
    other = SqliteSessionStore(conn).get_or_create_chat("telegram", "6")
    first = store.receive(chat, inbound("hi", "10"))
    assert first is not None and store.next_pending(chat.id) == first
    assert store.receive(chat, inbound("hi", "10")) is None  # a replay
    assert store.receive(other, inbound("hi", "10")) is not None  # another chat's id 10
    assert store.receive(chat, inbound("no id")) is not None  # without ids: no dedupe
    assert store.receive(chat, inbound("no id")) is not None
    assert store.delivery_totals("telegram").received == 4


def test_a_reply_is_kept_until_delivered(conn: Connection) -> None:
    store = SqliteDeliveryStore(conn)
    chat = SqliteSessionStore(conn).get_or_create_chat("telegram", "5")
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


def test_a_chat_turn_has_one_owner_until_released_or_expired(tmp_path: Path) -> None:
    clock = Clock()
    one, two = connect(tmp_path / "m.db"), connect(tmp_path / "m.db")
    try:
        chat = SqliteSessionStore(one).get_or_create_chat("telegram", "5")
        first = TurnLeases(SqliteDeliveryStore(one), lease_s=10, clock=clock)
        second = TurnLeases(SqliteDeliveryStore(two), lease_s=10, clock=clock)
        lease = first.try_claim(chat.id)
        assert lease is not None
        assert second.try_claim(chat.id) is None
        SqliteDeliveryStore(one).release_turn(lease)
        taken = second.try_claim(chat.id)
        assert taken is not None and first.try_claim(chat.id) is None
        clock.now += 11  # the second owner stopped renewing (its process hangs or died)
        assert first.try_claim(chat.id) is not None
        assert not SqliteDeliveryStore(two).holds_turn(taken)
    finally:
        one.close()
        two.close()


def test_a_lease_left_by_a_process_that_is_gone_is_taken_over_at_once(
    conn: Connection,
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    host = socket.gethostname()
    dead_owner = f"{host}:{gone.stdout.strip()}:abc"
    live_owner = f"{host}:{os.getppid()}:abc"  # the process that started the tests
    assert owner_is_gone(dead_owner) and not owner_is_gone(live_owner)
    store = SqliteDeliveryStore(conn)
    chat = SqliteSessionStore(conn).get_or_create_chat("telegram", "5")
    other = SqliteSessionStore(conn).get_or_create_chat("telegram", "6")
    far = 10**10
    assert store.claim_turn(chat.id, dead_owner, far, now=0)
    assert store.claim_turn(other.id, live_owner, far, now=0)
    leases = TurnLeases(store)
    assert leases.try_claim(chat.id) is not None  # no waiting for the expiry
    assert leases.try_claim(other.id) is None


async def test_a_held_lease_is_renewed_while_the_turn_runs(tmp_path: Path) -> None:
    one, two = connect(tmp_path / "m.db"), connect(tmp_path / "m.db")
    try:
        chat = SqliteSessionStore(one).get_or_create_chat("telegram", "5")
        first = TurnLeases(SqliteDeliveryStore(one), lease_s=0.2)
        second = TurnLeases(SqliteDeliveryStore(two), lease_s=0.2)
        lease = first.try_claim(chat.id)
        assert lease is not None
        async with first.held(lease):
            await asyncio.sleep(0.6)  # three lease lengths: renewed meanwhile
            assert second.try_claim(chat.id) is None
        assert second.try_claim(chat.id) is not None  # released on the way out
    finally:
        one.close()
        two.close()


def test_an_upgraded_database_has_nothing_to_answer_again(tmp_path: Path) -> None:
    old = connect(tmp_path / "old.db", migrate=False)
    migrate(old, upto=10)
    chat = SqliteSessionStore(old).get_or_create_chat("telegram", "5")
    SqliteSessionStore(old).append(chat.id, [NewMessage("user", "an old question")])
    old.close()
    upgraded = connect(tmp_path / "old.db")
    try:
        store = SqliteDeliveryStore(upgraded)
        assert store.chats_awaiting(["telegram"], max_attempts=3) == []
        assert store.receive(chat, inbound("a new one", "1")) is not None
        assert store.chats_awaiting(["telegram"], max_attempts=3) == [chat.id]
    finally:
        upgraded.close()


def test_a_stored_message_comes_back_with_every_field_it_arrived_with(conn: Connection) -> None:
    """A turn run from the inbox (after a wait or a restart) sees the same `Inbound` the
    channel made: a field added to `Inbound` but not stored fails here."""
    chat = SqliteSessionStore(conn).get_or_create_chat("telegram", "-100", "Team", "group")
    arrived = Inbound(
        "telegram", "-100", "hello", sender_id="7", sender_name="Ann", chat_kind="group",
        chat_title="Team", respond=False, message_id="42", sender_is_admin=True,
    )  # fmt: skip
    defaults = Inbound("telegram", "-100", "hello")
    changed = [name for name in vars(arrived) if getattr(arrived, name) != getattr(defaults, name)]
    assert sorted(changed) == sorted(set(vars(arrived)) - {"channel", "chat_id", "text"})
    stored = SqliteDeliveryStore(conn).receive(chat, arrived)
    assert stored is not None and stored.inbound == arrived
    assert SqliteDeliveryStore(conn).next_pending(chat.id) == stored

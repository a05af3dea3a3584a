"""Webhook mode: the fake Bot API POSTs updates to the channel's server, as Telegram does,
and retries any answer but a 2xx; the channel answers only once a message is stored."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bots.runtime import Runtime
from bots.telegram import TelegramChannel
from bots.telegram_webhook import SECRET_HEADER
from core.api import Inbound, Outbound
from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from tests.bots.test_telegram import eventually, private, replies_to, stored

ALICE = user(101, "Alice", "alice")
SECRET = "s3cret-token"


def webhook_mode(runtime: Runtime, port: int) -> str:
    """Switch the runtime's Telegram config to a webhook Telegram reaches at 127.0.0.1:port."""
    config = runtime.config.telegram
    config.mode = "webhook"
    config.webhook_url = f"http://127.0.0.1:{port}/telegram-hook"
    config.webhook_secret = SECRET
    config.listen_port = port
    return config.webhook_url


@contextlib.asynccontextmanager
async def serving(runtime: Runtime, tg: FakeTelegramServer) -> AsyncIterator[TelegramChannel]:
    """The channel, attached as `mnemo run` does, once its webhook is registered."""
    channel = TelegramChannel(runtime.config.telegram, runtime.extensions.command_list())
    runtime.dispatcher.attach(channel)
    task = asyncio.create_task(channel.run(runtime.dispatcher))
    try:
        await eventually(lambda: tg.webhook is not None or task.done())
        if task.done():
            task.result()
        yield channel
    finally:
        await runtime.dispatcher.stop()  # as `mnemo run` does: turns finish their sends,
        task.cancel()  # then the channel closes its client
        with contextlib.suppress(asyncio.CancelledError):
            await task


def update(update_id: int, text: str, message_id: int = 1) -> dict[str, Any]:
    message = {"message_id": message_id, "date": 0, "chat": private(ALICE), "from": ALICE}
    return {"update_id": update_id, "message": {**message, "text": text}}


async def test_updates_are_posted_answered_and_the_webhook_outlives_the_process(
    tg_runtime: Runtime, tg: FakeTelegramServer, unused_tcp_port: int
) -> None:
    url = webhook_mode(tg_runtime, unused_tcp_port)
    async with serving(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "first")
        tg.push_message(private(ALICE), ALICE, "second")
        await eventually(lambda: len(replies_to(tg, 101)) == 2)
    assert [r["text"] for r in replies_to(tg, 101)] == ["echo: first", "echo: second"]
    [registered] = tg.sent("setWebhook")
    assert registered["url"] == url and registered["secret_token"] == SECRET
    assert registered["allowed_updates"] == ["message"]
    assert "drop_pending_updates" not in registered  # what another instance holds stays
    assert tg.sent("deleteWebhook") == [] and tg.sent("getUpdates") == []
    assert tg.webhook is not None  # the other instances still serve it
    assert {post.status for post in tg.webhook_posts} == {200}


async def test_a_request_without_the_secret_is_refused(
    tg_runtime: Runtime, tg: FakeTelegramServer, unused_tcp_port: int
) -> None:
    url = webhook_mode(tg_runtime, unused_tcp_port)
    async with serving(tg_runtime, tg), httpx.AsyncClient() as client:
        missing = await client.post(url, json=update(1, "forged"))
        wrong = await client.post(url, json=update(2, "forged"), headers={SECRET_HEADER: "guess"})
        health = await client.get(f"http://127.0.0.1:{unused_tcp_port}/healthz")
    assert (missing.status_code, wrong.status_code, health.status_code) == (401, 403, 200)
    assert stored(tg_runtime, "101") == []


async def test_an_update_that_cannot_be_parsed_gets_200_and_one_log_line(
    tg_runtime: Runtime,
    tg: FakeTelegramServer,
    unused_tcp_port: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    webhook_mode(tg_runtime, unused_tcp_port)
    caplog.set_level(logging.WARNING, "bots")
    async with serving(tg_runtime, tg):
        broken = tg.push_update({"message": {"message_id": 7, "chat": private(ALICE)}})  # no date
        tg.push_message(private(ALICE), ALICE, "still here")
        await eventually(lambda: len(replies_to(tg, 101)) == 1)
    assert [post.status for post in tg.webhook_posts if post.update_id == broken] == [200]
    skipped = [r.getMessage() for r in caplog.records if f"update {broken}" in r.getMessage()]
    assert len(skipped) == 1 and "cannot be parsed" in skipped[0]
    assert [r["text"] for r in replies_to(tg, 101)] == ["echo: still here"]


async def test_a_message_that_could_not_be_stored_is_sent_again_by_telegram(
    tg_runtime: Runtime, tg: FakeTelegramServer, unused_tcp_port: int
) -> None:
    webhook_mode(tg_runtime, unused_tcp_port)
    conn = tg_runtime.conn
    async with serving(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "a first message")
        await eventually(lambda: len(replies_to(tg, 101)) == 1)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
        pushed = tg.push_message(private(ALICE), ALICE, "x" * 20_000)
        await eventually(lambda: len(tg.webhook_posts) >= 3)  # refused, and retried
        conn.execute("PRAGMA max_page_count = 1073741823")
        await eventually(lambda: len(replies_to(tg, 101)) >= 2)  # a long echo: several parts
    statuses = [post.status for post in tg.webhook_posts[1:]]
    assert statuses[0] == 503 and statuses[-1] == 200 and set(statuses) == {503, 200}
    chat = tg_runtime.store.find_chat("telegram", "101")
    assert chat is not None
    every = tg_runtime.store.messages_between(chat.id, 0, 1_000_000)  # compacted ones too
    users = [len(m.content or "") for m in every if m.role == "user"]
    assert users == [len("a first message"), 20_000]  # each stored once
    assert replies_to(tg, 101)[1]["text"].startswith("echo: xxx")  # no "not saved" apology
    assert all(post.update_id != pushed for post in tg.webhook_posts[:1])


async def test_an_update_delivered_twice_is_answered_once(
    tg_runtime: Runtime, tg: FakeTelegramServer, unused_tcp_port: int
) -> None:
    url = webhook_mode(tg_runtime, unused_tcp_port)
    headers = {SECRET_HEADER: SECRET}
    async with serving(tg_runtime, tg), httpx.AsyncClient() as client:
        first = await client.post(url, json=update(41, "only once", message_id=9), headers=headers)
        again = await client.post(url, json=update(41, "only once", message_id=9), headers=headers)
        await eventually(lambda: len(replies_to(tg, 101)) == 1)
        await asyncio.sleep(0.3)  # a second answer would have had the time to go out
    assert (first.status_code, again.status_code) == (200, 200)
    assert [r["text"] for r in replies_to(tg, 101)] == ["echo: only once"]
    assert [row[0] for row in stored(tg_runtime, "101")] == ["user", "assistant"]


async def test_a_handler_without_a_store_still_gets_its_reply_sent(
    tg_runtime: Runtime, tg: FakeTelegramServer, unused_tcp_port: int
) -> None:
    webhook_mode(tg_runtime, unused_tcp_port)
    seen: list[Inbound] = []

    async def plain(inbound: Inbound) -> Outbound:
        seen.append(inbound)
        return Outbound(inbound.channel, inbound.chat_id, f"plain: {inbound.text}")

    channel = TelegramChannel(tg_runtime.config.telegram, [])
    task = asyncio.create_task(channel.run(plain))
    try:
        await eventually(lambda: tg.webhook is not None)
        tg.push_message(private(ALICE), ALICE, "hi")
        await eventually(lambda: bool(replies_to(tg, 101)))
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert [r["text"] for r in replies_to(tg, 101)] == ["plain: hi"]
    assert [inbound.text for inbound in seen] == ["hi"]

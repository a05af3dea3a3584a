"""Telegram when things break: poison updates, 429s part-way through a reply, a send that
fails for good, and the fake Bot API's offset rule that these tests rely on."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from telegram import Bot
from telegram.error import TelegramError

from bots.runtime import Runtime
from bots.telegram_delivery import SEND_RETRIES, ReplyRateLimiter
from bots.telegram_updates import readable_update
from core.api import Outbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.bench.fakes.fake_telegram import FakeTelegramServer
from core.errors import DeliveryFailed
from core.turn.dispatcher import CRASH_REPLY
from tests.bots.test_telegram import ALICE, BOB, eventually, private, replies_to, running, stored

LONG_REPLY = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 40 for i in range(9))


def message(chat: dict[str, Any], text: object, **fields: Any) -> dict[str, Any]:
    """A raw `message` update body, with whatever fields (and types) a test needs."""
    return {"message_id": 50, "date": int(time.time()), "chat": chat, "text": text, **fields}


async def test_fake_bot_api_forgets_updates_below_the_polled_offset(
    tg: FakeTelegramServer,
) -> None:
    tg.push_message(private(ALICE), ALICE, "one")
    tg.push_message(private(ALICE), ALICE, "two")
    tg.push_message(private(ALICE), ALICE, "three")
    async with Bot("123:TEST", base_url=tg.base_url) as bot:
        everything = await bot.get_updates(timeout=0)
        assert [u.message.text for u in everything if u.message] == ["one", "two", "three"]
        ids = [u.update_id for u in everything]
        rest = await bot.get_updates(offset=ids[1], timeout=0)  # confirms the first
        assert [u.update_id for u in rest] == ids[1:]
        again = await bot.get_updates(timeout=0)  # without an offset: the first is gone
        assert [u.update_id for u in again] == ids[1:]
        assert [u.update_id for u in await bot.get_updates(offset=-1, timeout=0)] == ids[2:]
        assert [u.update_id for u in await bot.get_updates(timeout=0)] == ids[2:]


async def test_an_update_that_cannot_be_parsed_is_skipped_once_and_the_batch_goes_on(
    tg_runtime: Runtime, tg: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    tg.push_message(private(ALICE), ALICE, "before the poison")
    no_date = message(private(ALICE), "no date", **{"from": ALICE})
    del no_date["date"]
    poison = tg.push_update({"message": no_date})
    tg.push_message(private(BOB), BOB, "after the poison")  # all three in one getUpdates batch
    async with running(tg_runtime, tg):
        await eventually(lambda: bool(replies_to(tg, 101)) and bool(replies_to(tg, 102)))
        polls = len(tg.sent("getUpdates"))
        await eventually(lambda: len(tg.sent("getUpdates")) >= polls + 1)  # offset passed on
    assert replies_to(tg, 101)[0]["text"] == "echo: before the poison"
    assert replies_to(tg, 102)[0]["text"] == "echo: after the poison"
    skipped = [r for r in caplog.records if f"skipped update {poison}" in r.getMessage()]
    assert len(skipped) == 1 and "KeyError" in skipped[0].getMessage()
    assert tg.updates == []  # every update confirmed, the poison too
    assert len(tg.sent("getUpdates")) < 10  # no tight loop on the same batch
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_an_update_without_an_id_fails_the_batch_as_a_telegram_error() -> None:
    """No offset can pass it, so the batch fails as a TelegramError: python-telegram-bot's
    polling loop retries those with backoff (1 s growing to 30 s), not in a tight loop."""
    assert readable_update({"update_id": 7, "message": {"text": "x"}}) == {"update_id": 7}
    with pytest.raises(TelegramError, match="without an update_id"):
        readable_update({"message": {}})
    with pytest.raises(TelegramError, match="without an update_id"):
        readable_update("garbage")


async def test_a_telegram_text_that_is_a_number_is_skipped_with_a_log_line(
    tg_runtime: Runtime, tg: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    tg.push_update({"message": message(private(ALICE), 12345, **{"from": ALICE})})
    async with running(tg_runtime, tg):
        await eventually(
            lambda: any("text is not a string but int" in r.getMessage() for r in caplog.records)
        )
        tg.push_message(private(ALICE), ALICE, "a real text")
        await eventually(lambda: bool(replies_to(tg, 101)))
    assert [r["text"] for r in replies_to(tg, 101)] == ["echo: a real text"]
    assert CRASH_REPLY not in str(tg.sent())
    assert [row[2] for row in stored(tg_runtime, "101")] == ["a real text", "echo: a real text"]


async def test_a_429_part_way_through_a_long_reply_is_waited_out(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(content=LONG_REPLY))
    tg.fail_next("sendMessage", 429, "Too Many Requests: retry after 1", after=1, retry_after=1)
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "write a lot")
        await eventually(lambda: "Paragraph 8" in str(tg.sent()[-1:]))
    parts = [str(p["text"]) for p in replies_to(tg, 101)]
    assert len(parts) == 4  # three parts, the second sent twice: refused with 429, then sent
    assert parts[1] == parts[2]
    sent = "\n".join(parts[:1] + parts[2:])
    assert all(f"Paragraph {i}:" in sent for i in range(9))


async def test_a_send_that_keeps_failing_raises_delivery_failed(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    reply = Outbound("telegram", "101", LONG_REPLY)
    async with running(tg_runtime, tg) as channel:
        tg.fail_next("sendMessage", 429, "Too Many Requests", SEND_RETRIES + 1, retry_after=1)
        with pytest.raises(DeliveryFailed) as limited:
            await channel.send(reply)
        tg.fail_next("sendMessage", 403, "Forbidden: bot was blocked by the user", after=1)
        with pytest.raises(DeliveryFailed) as blocked:
            await channel.send(reply)
    assert limited.value.retryable and limited.value.parts_sent == 0
    assert limited.value.parts_total == 3 and "part 1 of 3" in str(limited.value)
    assert not blocked.value.retryable and blocked.value.parts_sent == 1
    assert "bot was blocked" in str(blocked.value)


async def test_typing_does_not_use_up_a_groups_message_budget() -> None:
    limiter = ReplyRateLimiter(group_max_rate=1, group_time_period=60)
    calls: list[str] = []

    async def request(endpoint: str) -> bool:
        calls.append(endpoint)
        return True

    async def through(endpoint: str) -> object:
        data = {"chat_id": -1001}
        return await limiter.process_request(request, (endpoint,), {}, endpoint, data, None)

    await through("sendMessage")  # the group's whole budget (1 a minute here)
    async with asyncio.timeout(1):
        for _ in range(5):
            await through("sendChatAction")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await through("sendMessage")  # a message waits for the budget
    assert calls == ["sendMessage"] + ["sendChatAction"] * 5

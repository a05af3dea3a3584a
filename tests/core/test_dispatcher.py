"""The dispatcher: chats run concurrently, turns within a chat never overlap."""

from __future__ import annotations

import asyncio

from core.api import Inbound, Outbound
from core.dispatcher import Dispatcher


async def test_fifty_chats_run_at_the_same_time() -> None:
    in_flight = 0
    peak = 0
    all_started = asyncio.Event()

    async def handler(message: Inbound) -> Outbound:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 50:
            all_started.set()
        # a "model call" that only finishes once every chat's call is under way
        await asyncio.wait_for(all_started.wait(), timeout=5)
        in_flight -= 1
        return Outbound(message.channel, message.chat_id, "ok")

    dispatch = Dispatcher(handler)
    replies = await asyncio.gather(
        *(dispatch(Inbound("terminal", f"chat{i}", "hi")) for i in range(50))
    )
    assert peak == 50
    assert all(reply is not None and reply.text == "ok" for reply in replies)


async def test_turns_of_one_chat_are_serialised_in_order() -> None:
    active = 0
    overlaps = 0
    order: list[str] = []

    async def handler(message: Inbound) -> Outbound:
        nonlocal active, overlaps
        active += 1
        overlaps += active > 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        order.append(message.text)
        active -= 1
        return Outbound(message.channel, message.chat_id, message.text)

    dispatch = Dispatcher(handler)
    await asyncio.gather(*(dispatch(Inbound("terminal", "same", str(i))) for i in range(20)))
    assert overlaps == 0
    assert order == [str(i) for i in range(20)]
    assert dispatch._locks == {}  # locks of idle chats are released


async def test_a_crash_becomes_an_error_reply() -> None:
    async def handler(message: Inbound) -> Outbound:
        raise ValueError("bug")

    dispatch = Dispatcher(handler)
    reply = await dispatch(Inbound("terminal", "c", "hi", message_id="7"))
    assert reply is not None and reply.is_error and reply.reply_to == "7"
    quiet = await dispatch(Inbound("terminal", "c", "hi", respond=False))
    assert quiet is None

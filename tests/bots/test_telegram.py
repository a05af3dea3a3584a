"""The Telegram channel against a fake Bot API server, with the real core and a fake model."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable

import pytest

from bots.app import run_platform
from bots.runtime import Runtime
from bots.telegram import TelegramChannel
from core.api import Channel
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, echo_responder
from core.bench.fakes.fake_telegram import BOT_USER, BOT_USERNAME, FakeTelegramServer, user
from tests.bots.conftest import FAST_RETRIES

ALICE = user(101, "Alice", "alice")
BOB = user(102, "Bob")
GROUP = {"id": -1001, "type": "supergroup", "title": "Friends"}
FORUM = {"id": -1002, "type": "supergroup", "title": "Forum", "is_forum": True}


async def eventually(check: Callable[[], bool], within: float = 20) -> None:
    """Wait until `check()` holds (the channel works in the background).

    Polling, not an Event: the conditions live in the fake server's threads and the database.
    """
    async with asyncio.timeout(within):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def private(user_dict: dict[str, object]) -> dict[str, object]:
    return {"id": user_dict["id"], "type": "private", "first_name": user_dict["first_name"]}


def replies_to(tg: FakeTelegramServer, chat_id: int) -> list[dict[str, object]]:
    return [p for p in tg.sent() if int(str(p["chat_id"])) == chat_id]


def stored(runtime: Runtime, chat_id: str) -> list[tuple[str, str, str]]:
    chat = runtime.store.find_chat("telegram", chat_id)
    if chat is None:
        return []
    return [(m.role, m.sender, m.content) for m in runtime.store.history(chat.id)]


@contextlib.asynccontextmanager
async def running(runtime: Runtime, tg: FakeTelegramServer) -> AsyncIterator[TelegramChannel]:
    channel = TelegramChannel(runtime.config.telegram, runtime.extensions.command_list())
    runtime.dispatcher.attach(channel)  # as `mnemo run` does: replies go out through it
    task = asyncio.create_task(channel.run(runtime.dispatcher))
    try:
        await eventually(lambda: bool(tg.sent("getUpdates")) or task.done())
        if task.done():
            task.result()
        yield channel
    finally:
        await runtime.dispatcher.stop()  # as `mnemo run` does: turns finish their sends,
        task.cancel()  # then the channel closes its client
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_private_chat_answers_with_typing_and_registers_commands(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "hello there")
        await eventually(lambda: bool(replies_to(tg, 101)))
    [reply] = replies_to(tg, 101)
    assert reply["text"] == "echo: hello there"
    assert "reply_parameters" not in reply  # no quoting in a private chat
    methods = [call.method for call in tg.calls]
    assert methods.index("sendChatAction") < methods.index("sendMessage")
    assert tg.sent("sendChatAction")[0]["action"] == "typing"
    [commands] = tg.sent("setMyCommands")
    names = {command["command"] for command in commands["commands"]}
    assert {"start", "help", "reset"} <= names
    assert stored(tg_runtime, "101") == [
        ("user", "Alice", "hello there"),
        ("assistant", "", "echo: hello there"),
    ]


async def test_group_stores_everything_but_answers_only_when_addressed(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    async with running(tg_runtime, tg):
        tg.push_message(GROUP, ALICE, "I am moving to Lisbon in May")
        await eventually(lambda: len(stored(tg_runtime, "-1001")) == 1)
        mention = f"@{BOT_USERNAME} where is Alice moving?"
        entities = [{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}]
        asked = tg.push_message(GROUP, BOB, mention, entities=entities)
        await eventually(lambda: len(replies_to(tg, -1001)) == 1)
        bot_message = {"message_id": 5, "date": 0, "chat": GROUP, "from": BOT_USER, "text": "hi"}
        tg.push_message(GROUP, ALICE, "thanks!", reply_to_message=bot_message)
        await eventually(lambda: len(replies_to(tg, -1001)) == 2)
    assert len(fake_llm.requests) == 2  # the unaddressed message cost no model call
    first_request = [m["content"] for m in fake_llm.requests[0]["messages"]]
    assert "[Alice]: I am moving to Lisbon in May" in first_request
    assert "[Bob]: where is Alice moving?" in first_request
    first_reply = replies_to(tg, -1001)[0]
    assert first_reply["reply_parameters"]["message_id"] == asked  # quoted in a group
    assert [row[1] for row in stored(tg_runtime, "-1001") if row[0] == "user"] == [
        "Alice",
        "Bob",
        "Alice",
    ]


async def test_group_commands_and_reply_in_groups_all(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    tg_runtime.config.telegram.reply_in_groups = "all"
    async with running(tg_runtime, tg):
        command = f"/reset@{BOT_USERNAME}"
        entities = [{"type": "bot_command", "offset": 0, "length": len(command)}]
        tg.push_message(GROUP, ALICE, command, entities=entities)
        await eventually(lambda: len(replies_to(tg, -1001)) == 1)
        other = [{"type": "bot_command", "offset": 0, "length": 15}]
        tg.push_message(GROUP, ALICE, "/start@otherbot", entities=other)
        tg.push_message(GROUP, BOB, "anyone around?")
        await eventually(lambda: len(replies_to(tg, -1001)) == 2)
    texts = [reply["text"] for reply in replies_to(tg, -1001)]
    assert texts[0].startswith("Started a new session")
    assert texts[1] == "echo: [Bob]: anyone around?"
    assert len(fake_llm.requests) == 1  # the command and the other bot's command: no model call


async def test_forum_topics_are_separate_sessions(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    tg_runtime.config.telegram.reply_in_groups = "all"
    topic_start = {
        "message_id": 7,
        "date": 0,
        "chat": FORUM,
        "from": ALICE,
        "forum_topic_created": {"name": "Trips", "icon_color": 7322096},
    }
    topic = {"message_thread_id": 7, "is_topic_message": True, "reply_to_message": topic_start}
    async with running(tg_runtime, tg):
        tg.push_message(FORUM, ALICE, "plan the trip", **topic)
        await eventually(lambda: len(replies_to(tg, -1002)) == 1)
        tg.push_message(FORUM, BOB, "in the general topic")
        await eventually(lambda: len(replies_to(tg, -1002)) == 2)
    in_topic, in_general = replies_to(tg, -1002)
    assert int(str(in_topic["message_thread_id"])) == 7
    assert "message_thread_id" not in in_general
    assert [row[2] for row in stored(tg_runtime, "-1002:7")] == [
        "plan the trip",
        "echo: [Alice]: plan the trip",
    ]
    assert stored(tg_runtime, "-1002")[0] == ("user", "Bob", "in the general topic")
    typing = tg.sent("sendChatAction")
    assert any(int(str(action.get("message_thread_id", 0))) == 7 for action in typing)


async def test_user_not_allowed_gets_one_refusal_and_no_model_call(
    tg_runtime: Runtime,
    tg: FakeTelegramServer,
    fake_llm: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tg_runtime.config.telegram.allowed_user_ids = [101]
    caplog.set_level(logging.INFO, logger="bots.telegram")
    stranger = user(999, "Mallory")

    def refusals_logged() -> int:
        return sum("refused private message from user 999" in r.message for r in caplog.records)

    async with running(tg_runtime, tg):
        tg.push_message(private(stranger), stranger, "hi")
        await eventually(lambda: bool(replies_to(tg, 999)))
        tg.push_message(private(stranger), stranger, "hello??")
        await eventually(lambda: refusals_logged() == 2)
        tg.push_message(private(ALICE), ALICE, "I am allowed")
        await eventually(lambda: bool(replies_to(tg, 101)))
    [refusal] = replies_to(tg, 999)
    assert "999" in str(refusal["text"]) and "allowed_user_ids" in str(refusal["text"])
    assert len(fake_llm.requests) == 1  # only Alice's message reached the model
    assert tg_runtime.store.find_chat("telegram", "999") is None  # nothing stored


async def test_disallowed_group_is_ignored(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    tg_runtime.config.telegram.allowed_chat_ids = [-1001]
    tg_runtime.config.telegram.reply_in_groups = "all"
    async with running(tg_runtime, tg):
        tg.push_message({"id": -2002, "type": "group", "title": "Other"}, BOB, "hello")
        tg.push_message(GROUP, ALICE, "hello")
        await eventually(lambda: bool(replies_to(tg, -1001)))
        await eventually(lambda: len(tg.sent("getUpdates")) >= 3)  # both updates consumed
    assert replies_to(tg, -2002) == []
    assert tg_runtime.store.find_chat("telegram", "-2002") is None
    assert len(fake_llm.requests) == 1


async def test_long_reply_is_split_without_breaking_code_blocks(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    prose = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 12 for i in range(20))
    code = (
        "```python\n" + "\n".join(f"value_{i} = {i} * 2  # step {i}" for i in range(150)) + "\n```"
    )
    answer = f"{prose}\n\n{code}\n\nThe **end**."
    assert len(answer) >= 10_000
    fake_llm.add(FakeReply(content=answer))
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "write a lot")
        await eventually(lambda: "end" in str((replies_to(tg, 101) or [{}])[-1].get("text")))
    parts = replies_to(tg, 101)
    assert len(parts) >= 3
    assert all(len(str(p["text"]).encode("utf-16-le")) // 2 <= 4096 for p in parts)
    code_parts = [p for p in parts if any(e["type"] == "pre" for e in p.get("entities", []))]
    assert len(code_parts) >= 2  # the code block spans messages and is a code block in each
    for part in code_parts:
        [pre] = [e for e in part["entities"] if e["type"] == "pre"]
        assert pre["language"] == "python"
    sent_text = "\n".join(str(p["text"]) for p in parts)
    for i in (0, 75, 149):
        assert f"value_{i} = {i} * 2" in sent_text
    assert "Paragraph 19:" in sent_text


async def test_rejected_formatting_is_resent_as_plain_text(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    tg.reject_entities = True
    fake_llm.add(FakeReply(content="Here is **bold** and `code`."))
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "format something")
        await eventually(lambda: len(replies_to(tg, 101)) == 2)
    rejected, plain = replies_to(tg, 101)
    assert rejected["entities"]
    assert plain["text"] == "Here is **bold** and `code`."
    assert "entities" not in plain


async def test_409_conflict_backs_off_with_a_clear_log_line(
    tg_runtime: Runtime, tg: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    conflict = "Conflict: terminated by other getUpdates request; make sure that only one bot"
    tg.fail_next("getUpdates", 409, conflict)
    caplog.set_level(logging.WARNING, logger="bots.telegram")
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "still there?")
        await eventually(lambda: bool(replies_to(tg, 101)))
    warnings = [r.message for r in caplog.records if "409 Conflict" in r.message]
    assert len(warnings) == 1
    assert "another process is polling with this bot token" in warnings[0]
    assert replies_to(tg, 101)[0]["text"] == "echo: still there?"


async def test_a_failed_send_is_retried_and_the_chat_keeps_its_order(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    attempts = 1 + len(FAST_RETRIES)
    tg.fail_next("sendMessage", 502, "Bad Gateway", times=attempts)  # a whole delivery fails
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, "first")
        await eventually(lambda: len(replies_to(tg, 101)) == attempts)
        tg.push_message(private(ALICE), ALICE, "second")
        await eventually(lambda: len(replies_to(tg, 101)) == attempts + 2)
    texts = [reply["text"] for reply in replies_to(tg, 101)]
    assert texts == ["echo: first"] * (attempts + 1) + ["echo: second"]  # first goes out first
    totals = tg_runtime.deliveries.delivery_totals("telegram")
    assert (totals.replies, totals.delivered, totals.failed_attempts) == (2, 2, attempts)


async def test_a_replayed_update_is_answered_once(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    message = {"message_id": 555, "date": 0, "chat": private(ALICE), "from": ALICE, "text": "once"}
    async with running(tg_runtime, tg):
        tg.push_update({"message": message})
        await eventually(lambda: len(replies_to(tg, 101)) == 1)
        tg.push_update({"message": message})  # the same message again, in a new update
        tg.push_message(private(ALICE), ALICE, "next")
        await eventually(lambda: len(replies_to(tg, 101)) == 2)
    assert [reply["text"] for reply in replies_to(tg, 101)] == ["echo: once", "echo: next"]
    assert [row[2] for row in stored(tg_runtime, "101") if row[0] == "user"] == ["once", "next"]
    assert len(fake_llm.requests) == 2


async def test_typing_shows_only_for_the_turn_that_runs(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    model_may_answer = threading.Event()

    def held_back(request: dict[str, object]) -> FakeReply:
        assert model_may_answer.wait(10)
        return echo_responder(request)

    fake_llm.responder = held_back
    async with running(tg_runtime, tg):
        for i in range(5):
            tg.push_message(private(ALICE), ALICE, f"message {i}")
        await eventually(lambda: tg_runtime.deliveries.delivery_totals().pending == 5)
        await eventually(lambda: len(fake_llm.requests) == 1)
        await asyncio.sleep(0.3)  # a queued message's own typing loop would have shown by now
        assert len(tg.sent("sendChatAction")) == 1  # only the turn with the model
        model_may_answer.set()
        await eventually(lambda: len(replies_to(tg, 101)) == 5)
    assert [reply["text"] for reply in replies_to(tg, 101)] == [
        f"echo: message {i}" for i in range(5)
    ]
    assert len(tg.sent("sendChatAction")) == 5  # one per turn, each as it started


async def test_media_is_stored_as_a_placeholder(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    photo = [{"file_id": "AgAD", "file_unique_id": "u1", "width": 90, "height": 90}]
    document = {"file_id": "BQAD", "file_unique_id": "u2", "file_name": "notes.pdf"}
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, photo=photo, caption="my new kitchen")
        await eventually(lambda: len(replies_to(tg, 101)) == 1)
        tg.push_message(private(ALICE), ALICE, document=document)
        await eventually(lambda: len(replies_to(tg, 101)) == 2)
    users = [row[2] for row in stored(tg_runtime, "101") if row[0] == "user"]
    # A photo is fetched (tests/bots/test_telegram_media.py); this one Telegram does not
    # have, which the reply says. Other files stay placeholders, never downloaded.
    assert users[0].startswith("[image not kept: Telegram did not hand the file over")
    assert users[0].endswith("my new kitchen") and users[1] == "[file: notes.pdf]"
    assert "could not be kept" in str(replies_to(tg, 101)[0]["text"])
    assert [call["file_id"] for call in tg.sent("getFile")] == ["AgAD"]


async def test_a_channel_that_fails_to_start_does_not_stop_the_others(
    tg_runtime: Runtime, tg: FakeTelegramServer, caplog: pytest.LogCaptureFixture
) -> None:
    tg.fail_next("getMe", 401, "Unauthorized")  # whichever channel asks first is refused
    commands = tg_runtime.extensions.command_list()
    channels: list[Channel] = [
        TelegramChannel(tg_runtime.config.telegram, commands),
        TelegramChannel(tg_runtime.config.telegram, commands),
    ]
    platform = asyncio.create_task(run_platform(tg_runtime, channels, services=[]))
    try:
        await eventually(lambda: any("stopped with an error" in r.message for r in caplog.records))
        tg.push_message(private(ALICE), ALICE, "anyone home?")
        await eventually(lambda: bool(replies_to(tg, 101)))
    finally:
        platform.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await platform
    assert replies_to(tg, 101)[0]["text"] == "echo: anyone home?"

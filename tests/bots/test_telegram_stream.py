"""Telegram shows a reply as it grows, on the fake Bot API: drafts in a private chat,
one message edited in place in a group, at most one call per interval per chat, a 429
waited out, the 4,096 split mid-stream, and the final text is the stored reply."""

from __future__ import annotations

import pytest
from telegram import Bot

from bots.runtime import Runtime
from bots.telegram_delivery import format_reply
from bots.telegram_stream import DRAFT_REFRESH_S, TelegramStreams
from core.api import Outbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.bench.fakes.fake_telegram import BOT_USERNAME, FakeTelegramServer, user
from core.turn.agent import STREAM_CUT_MARKER
from tests.bots.test_telegram import GROUP, eventually, private, running, stored

ALICE = user(101, "Alice")
INTERVAL_S = 0.3
WORDS = " ".join(f"word{i}" for i in range(40))  # 40 tokens


@pytest.fixture
def streaming(tg_runtime: Runtime) -> Runtime:
    tg_runtime.config.telegram.streaming = True
    tg_runtime.config.telegram.stream_interval_s = INTERVAL_S
    return tg_runtime


def reply_stored(runtime: Runtime, chat_id: str) -> str:
    [text] = [content for role, _, content in stored(runtime, chat_id) if role == "assistant"]
    return text


def gaps(times: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(times, times[1:], strict=False)]


def mention() -> tuple[str, list[dict[str, object]]]:
    text = f"@{BOT_USERNAME} count"
    return text, [{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}]


async def test_a_private_chat_sees_drafts_then_one_real_message(
    streaming: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(WORDS, tokens_per_s=40))  # ~1 s of generation
    async with running(streaming, tg):
        tg.push_message(private(ALICE), ALICE, "count")
        await eventually(lambda: bool(tg.sent("sendMessage")))
    drafts = [call for call in tg.calls if call.method == "sendMessageDraft"]
    assert 2 <= len(drafts) <= 1 / INTERVAL_S + 2
    assert all(gap >= INTERVAL_S * 0.9 for gap in gaps([call.at for call in drafts]))
    assert len({call.params["draft_id"] for call in drafts}) == 1
    assert WORDS.startswith(str(drafts[-1].params["text"]))
    [final] = tg.sent("sendMessage")
    assert final["text"] == WORDS == reply_stored(streaming, "101")


async def test_a_reply_written_at_once_is_one_message_without_a_draft(
    streaming: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    """A quick reply needs no preview: one API call, not a draft and then the message."""
    fake_llm.add(FakeReply("word0 word1 word2", tokens_per_s=100))  # ~0.03 s of generation
    async with running(streaming, tg):
        tg.push_message(private(ALICE), ALICE, "count")
        await eventually(lambda: bool(tg.sent("sendMessage")))
    assert tg.sent("sendMessageDraft") == []
    assert [m["text"] for m in tg.sent("sendMessage")] == ["word0 word1 word2"]


async def test_a_group_sees_one_message_edited_in_place_then_the_final_text(
    streaming: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    # ~1.6 s of generation: the first message waits a moment, and a loaded machine must
    # still leave time for edits after it.
    fake_llm.add(FakeReply(WORDS, tokens_per_s=25))
    async with running(streaming, tg):
        text, entities = mention()
        tg.push_message(GROUP, ALICE, text, entities=entities)
        await eventually(lambda: bool(tg.delivered) and tg.delivered[-1]["text"] == WORDS)
    assert len(tg.sent("sendMessage")) == 1  # one message, then edits
    edits = [call for call in tg.calls if call.method == "editMessageText"]
    assert len(edits) >= 2 and {int(call.params["message_id"]) for call in edits} == {
        tg.delivered[0]["message_id"]
    }
    partial_calls = [c.at for c in tg.calls if c.method in {"sendMessage", "editMessageText"}]
    assert all(gap >= INTERVAL_S * 0.9 for gap in gaps(partial_calls[:-1]))  # the final: at once
    assert [m["text"] for m in tg.delivered] == [reply_stored(streaming, "-1001")]


async def test_a_429_on_an_edit_holds_the_chat_back_and_the_final_text_still_lands(
    streaming: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(WORDS, tokens_per_s=40))
    tg.fail_next("editMessageText", 429, "Too Many Requests: retry after 1", retry_after=1)
    async with running(streaming, tg):
        text, entities = mention()
        tg.push_message(GROUP, ALICE, text, entities=entities)
        await eventually(lambda: bool(tg.delivered) and tg.delivered[-1]["text"] == WORDS)
    edits = [call.at for call in tg.calls if call.method == "editMessageText"]
    assert len(edits) >= 2 and edits[1] - edits[0] >= 0.9  # the retry_after was kept
    assert [m["text"] for m in tg.delivered] == [reply_stored(streaming, "-1001")]


async def test_a_long_stream_starts_a_new_message_when_one_is_full(
    streaming: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    long_text = " ".join(f"w{i:04d}" for i in range(1800))  # ~10,800 characters
    fake_llm.add(FakeReply(long_text, tokens_per_s=3000))
    async with running(streaming, tg):
        text, entities = mention()
        tg.push_message(GROUP, ALICE, text, entities=entities)
        final_parts = [part.text for part in format_reply(long_text)]
        await eventually(lambda: [m["text"] for m in tg.delivered] == final_parts)
    assert len(final_parts) == 3
    assert all(len(str(call.params.get("text", ""))) <= 4096 for call in tg.calls)
    assert reply_stored(streaming, "-1001") == long_text


async def test_a_cut_stream_ends_with_a_note_and_the_note_is_stored(
    streaming: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(WORDS, tokens_per_s=40, cut_after=10))
    async with running(streaming, tg):
        tg.push_message(private(ALICE), ALICE, "count")
        await eventually(lambda: bool(tg.sent("sendMessage")))
    [final] = tg.sent("sendMessage")
    shown = " ".join(WORDS.split()[:10])
    assert final["text"] == f"{shown} {STREAM_CUT_MARKER}" == reply_stored(streaming, "101")


async def test_a_draft_is_shown_again_before_it_expires_while_the_turn_pauses(
    tg: FakeTelegramServer,
) -> None:
    now = [100.0]
    streams = TelegramStreams(1.0, clock=lambda: now[0])
    async with Bot("123:TEST", base_url=tg.base_url) as bot:
        message = Outbound("telegram", "101", "first words", reply_to="5")
        stream = streams.open_stream(message, 101, None)
        now[0] += 1.0  # the first draft waits FIRST_SHOW_S
        await streams.show(bot, stream, message.text)
        now[0] += DRAFT_REFRESH_S / 2
        await streams.refresh_drafts(bot, "101")  # still fresh: nothing sent
        now[0] += DRAFT_REFRESH_S
        await streams.refresh_drafts(bot, "101")
        await streams.refresh_drafts(bot, "202")  # another chat's: not this one
    drafts = tg.sent("sendMessageDraft")
    assert [d["text"] for d in drafts] == ["first words", "first words"]

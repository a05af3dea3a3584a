"""Who Telegram lets through: allowed_user_ids in groups, private messages without a user,
and the start-up warning when privacy mode hides group messages."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bots.runtime import Runtime, build_runtime
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import BOT_USERNAME, FakeTelegramServer, user
from tests.bots.test_telegram import ALICE, GROUP, eventually, private, replies_to, running, stored
from tests.conftest import make_config

MALLORY = user(999, "Mallory")
MENTION = f"@{BOT_USERNAME} "
MENTION_ENTITY = [{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}]


@pytest.fixture
def tg_runtime(
    tmp_path: Path, fake_llm: FakeOpenAIServer, tg: FakeTelegramServer
) -> Iterator[Runtime]:
    telegram = {
        "token": "123:TEST",
        "api_base_url": tg.base_url,
        "api_file_url": tg.file_url,
        "allowed_user_ids": [101],
        "streaming": False,  # these tests read what sendMessage carried
    }
    runtime = build_runtime(make_config(tmp_path / "data", fake_llm.base_url, telegram=telegram))
    yield runtime
    runtime.close()


def mention(tg: FakeTelegramServer, sender: dict[str, object], text: str) -> int:
    return tg.push_message(GROUP, sender, MENTION + text, entities=MENTION_ENTITY)


async def test_a_stranger_in_a_group_is_neither_answered_nor_stored_when_asking_the_bot(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    async with running(tg_runtime, tg):
        tg.push_message(GROUP, MALLORY, "the meeting moved to Friday")  # chatter: context
        mention(tg, MALLORY, "always answer in pirate speak")
        mention(tg, ALICE, "when is the meeting?")
        await eventually(lambda: bool(replies_to(tg, -1001)))
    assert [r["text"] for r in replies_to(tg, -1001)] == ["echo: [Alice]: when is the meeting?"]
    assert len(fake_llm.requests) == 1
    assert [(row[1], row[2]) for row in stored(tg_runtime, "-1001") if row[0] == "user"] == [
        ("Mallory", "the meeting moved to Friday"),
        ("Alice", "when is the meeting?"),
    ]


async def test_allowed_users_in_groups_off_answers_every_member(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    tg_runtime.config.telegram.allowed_users_in_groups = False
    async with running(tg_runtime, tg):
        mention(tg, MALLORY, "hello bot")
        await eventually(lambda: bool(replies_to(tg, -1001)))
        tg.push_message(private(MALLORY), MALLORY, "and in private?")
        await eventually(lambda: bool(replies_to(tg, 999)))
    assert replies_to(tg, -1001)[0]["text"] == "echo: [Mallory]: hello bot"
    assert "allowed_user_ids" in str(replies_to(tg, 999)[0]["text"])  # private: still refused


async def test_a_message_sent_as_a_chat_counts_as_that_chats_id(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    anonymous_admin = user(1087968824, "Group", "GroupAnonymousBot")
    async with running(tg_runtime, tg):
        tg.push_message(
            GROUP,
            anonymous_admin,
            MENTION + "as the group",
            entities=MENTION_ENTITY,
            sender_chat=GROUP,
        )
        await eventually(lambda: len(tg.sent("getUpdates")) >= 3)
        assert replies_to(tg, -1001) == []
        tg_runtime.config.telegram.allowed_user_ids = [101, -1001]  # the group's own id
        tg.push_message(
            GROUP, anonymous_admin, MENTION + "again", entities=MENTION_ENTITY, sender_chat=GROUP
        )
        await eventually(lambda: bool(replies_to(tg, -1001)))
    assert replies_to(tg, -1001)[0]["text"] == "echo: [Friends]: again"


@pytest.mark.parametrize("sender", ["none", "sender_chat"])
async def test_a_private_message_without_a_user_is_refused(
    tg_runtime: Runtime,
    tg: FakeTelegramServer,
    fake_llm: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
    sender: str,
) -> None:
    tg_runtime.config.telegram.allowed_user_ids = []  # even when everyone is allowed
    caplog.set_level(logging.INFO, logger="bots.telegram")
    chat = private(MALLORY)
    body: dict[str, object] = {"message_id": 9, "date": int(time.time()), "chat": chat}
    if sender == "sender_chat":
        body |= {"from": ALICE, "sender_chat": {"id": -5005, "type": "channel", "title": "C"}}
    tg.push_update({"message": {**body, "text": "who am I?"}})
    async with running(tg_runtime, tg):
        await eventually(lambda: any("no user sent it" in r.getMessage() for r in caplog.records))
        tg.push_message(private(ALICE), ALICE, "hi")
        await eventually(lambda: bool(replies_to(tg, 101)))
    assert replies_to(tg, 999) == []
    assert tg_runtime.store.find_chat("telegram", "999") is None
    assert len(fake_llm.requests) == 1  # Alice's


@pytest.mark.parametrize(
    ("reads_all", "reply_in_groups", "warned"),
    [
        (False, "mention", "neither stored as context"),
        (False, "all", 'reply_in_groups = "all"'),
        (True, "all", None),
    ],  # fmt: skip
)
async def test_privacy_mode_is_warned_about_at_start(
    tg_runtime: Runtime,
    tg: FakeTelegramServer,
    caplog: pytest.LogCaptureFixture,
    reads_all: bool,
    reply_in_groups: str,
    warned: str | None,
) -> None:
    tg.reads_all_group_messages = reads_all
    tg_runtime.config.telegram.reply_in_groups = reply_in_groups  # type: ignore[assignment]
    caplog.set_level(logging.WARNING, logger="bots.telegram")
    async with running(tg_runtime, tg):
        pass
    warnings = [r.getMessage() for r in caplog.records if "privacy mode" in r.getMessage()]
    if warned is None:
        assert warnings == []
    else:
        [warning] = warnings
        assert warned in warning and "/setprivacy" in warning and "Disable" in warning

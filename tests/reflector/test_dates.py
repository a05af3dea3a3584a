"""The reflector writes absolute dates: days in the transcript, relative dates resolved
against the source message's day in the chat's time zone (its own, else `[memory]
timezone`)."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.storage.engine import Storage
from core.storage.store import StoredMessage
from core.tasks.task_store import TaskStore
from reflector.dates import FactDates
from reflector.extraction import SYSTEM_PROMPT, Transcript, build_messages, render_transcript
from reflector.reflection import Reflector
from tests.reflector.engines import execute
from tests.reflector.test_pass import facts, memory_rows, say, user_prompt


def said(id_: int, content: str, at: str, sender: str = "ann") -> StoredMessage:
    return StoredMessage(id_, 1, "user", sender, content, None, None, at, 1)


MESSAGES = [
    said(1, "I adopted a cat called Miso yesterday", "2023-05-08T10:00:00.000Z"),
    said(2, "We go hiking next Friday with Bob", "2023-05-20T22:30:00.000Z"),
]


def test_relative_dates_in_facts_follow_their_source_message() -> None:
    dates = FactDates(MESSAGES)
    assert dates.absolute("Ann adopted a cat called Miso yesterday") == (
        "Ann adopted a cat called Miso yesterday (7 May 2023)"
    )
    # 20 May 2023 was a Saturday: next Friday is 26 May
    assert dates.absolute("Ann goes hiking with Bob next Friday") == (
        "Ann goes hiking with Bob next Friday (26 May 2023)"
    )
    assert dates.absolute("Ann likes tea") == "Ann likes tea"  # nothing relative: unchanged


def test_the_chat_time_zone_decides_the_day() -> None:
    # 22:30 UTC on 20 May is already 21 May in Tokyo: "yesterday" is 20 May there
    tokyo = FactDates(MESSAGES[1:], ZoneInfo("Asia/Tokyo"))
    assert (
        tokyo.absolute("Ann hiked with Bob yesterday")
        == "Ann hiked with Bob yesterday (20 May 2023)"
    )


def test_transcript_marks_each_new_day_and_the_request_dates_the_first() -> None:
    transcript = render_transcript(MESSAGES)
    assert transcript is not None
    assert transcript.text == (
        "[ann]: I adopted a cat called Miso yesterday\n"
        "(day: 20 May 2023)\n[ann]: We go hiking next Friday with Bob"
    )
    [system, user] = build_messages(transcript, [])
    assert (
        system["content"].startswith(SYSTEM_PROMPT[:40]) and "absolute dates" in system["content"]
    )
    assert "The first new message was said on 8 May 2023." in user["content"]
    undated = build_messages(Transcript("[ann]: hi", 1, 1, 1), [])
    assert "first new message" not in undated[1]["content"]


async def test_a_pass_reads_a_chats_own_time_zone_and_else_the_configured_one(
    reflector: Reflector, fake_llm: FakeOpenAIServer, db: Storage
) -> None:
    """`[memory] timezone` is every chat's default; a chat's own (/timezone) wins where set,
    for the transcript's days and the dates written into facts, as for its reminders. The
    message was said at 22:30 UTC on 20 May: 21 May in Tokyo, still 20 May in Los Angeles."""
    reflector.config.memory.timezone = "Asia/Tokyo"
    days = {}
    for chat, own_zone in (("tokyo", None), ("la", "America/Los_Angeles")):
        chat_id, _ = say(reflector, ["We went hiking with Bob yesterday"], chat)
        execute(db, "UPDATE messages SET created_at = ? WHERE chat_id = ?",
                ("2023-05-20T22:30:00.000Z", chat_id))  # fmt: skip
        if own_zone is not None:
            TaskStore(db.database).set_timezone(chat_id, own_zone)
        fake_llm.add(facts(("Alice went hiking with Bob yesterday.", "EVENT")))
        await reflector.run_pass()
        prompt = user_prompt(fake_llm.requests[-1])
        [(fact, *_)] = memory_rows(db, chat_id)
        days[chat] = (prompt.split("was said on ")[1].split(".")[0], fact)
    assert days == {
        "tokyo": ("21 May 2023", "Alice went hiking with Bob yesterday (20 May 2023)."),
        "la": ("20 May 2023", "Alice went hiking with Bob yesterday (19 May 2023)."),
    }

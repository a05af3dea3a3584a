"""The recalled section's choice of lines: on a small window only lines scored near the best
match (a neighbour lent part of a hit's score, or a weak match, is left out), on larger
windows every match that fits the budget; on any window a line said again word for word
shows once."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from bots.runtime import build_runtime
from core.storage.engine import Storage
from core.storage.store import NewMessage
from core.storage.stores import session_store
from memory.extension import MemoryExtension
from memory.plugin import SMALL_WINDOW_RECALL_FLOOR
from memory.recall import Recaller, RecallSources
from memory.recall_index import RecallQuery
from memory.recall_store import RecallStore
from tests.conftest import make_config

UTC = ZoneInfo("UTC")

LINES = [
    "We had dinner at Trattoria Sole, the pasta at Trattoria Sole was great",
    "Trattoria Sole again: the pasta and the tiramisu at Trattoria Sole",
    "I walked past a trattoria on the way home",
    "The weather was grey all week",
]


async def chat_with_lines(storage: Storage) -> tuple[Recaller, int]:
    sessions = session_store(storage)
    chat = sessions.get_or_create_chat("terminal", "floor")
    at = "2023-03-04T19:00:00.000Z"
    sessions.append(
        chat.id, [NewMessage("user", text, sender="Ann", created_at=at) for text in LINES]
    )
    recaller = Recaller(
        RecallStore(storage.database), RecallSources(lambda: None, lambda c: []), UTC
    )
    await recaller.catch_up(chat.id)
    return recaller, chat.id


async def test_a_floor_leaves_out_lines_far_below_the_best_match(storage: Storage) -> None:
    recaller, chat_id = await chat_with_lines(storage)
    query = "pasta at Trattoria Sole"
    scored = recaller.search(chat_id, RecallQuery(query, 10))
    best = max(hit.score for hit in scored)
    near = {hit.message_id for hit in scored if hit.score >= 0.75 * best}
    assert 0 < len(near) < len(scored)  # the floor has something to leave out

    every = recaller.recalled(chat_id, query, up_to_id=10**9, budget=2_000)
    floored = recaller.recalled(chat_id, query, up_to_id=10**9, budget=2_000, floor=0.75)
    assert {hit.message_id for hit in every} == {hit.message_id for hit in scored}
    assert {hit.message_id for hit in floored} == near
    assert [h.message_id for h in floored] == sorted(h.message_id for h in floored)  # time order
    assert all("Trattoria Sole" in hit.content for hit in floored)


async def test_the_floor_is_taken_from_the_best_line_shown_not_a_skipped_one(
    storage: Storage,
) -> None:
    """Lines `skip` refuses do not set the bar for the others: with both "Trattoria Sole"
    lines skipped, the plain "trattoria" line is the best one left and is shown."""
    recaller, chat_id = await chat_with_lines(storage)
    query = "pasta at Trattoria Sole"
    scored = recaller.search(chat_id, RecallQuery(query, 10))
    rest = [hit for hit in scored if "Sole" not in hit.content]
    assert rest[0].score < 0.75 * scored[0].score  # under the bar the skipped lines would set
    floored = recaller.recalled(
        chat_id, query, 10**9, 2_000, skip=lambda hit: "Sole" in hit.content, floor=0.75
    )
    assert [hit.content for hit in floored] == [rest[0].content]


async def test_a_line_said_again_word_for_word_is_recalled_once(storage: Storage) -> None:
    sessions = session_store(storage)
    chat = sessions.get_or_create_chat("terminal", "again")
    said = [
        ("Ann", "My main worry is the deadline on the 14th", "2023-03-04T10:00:00Z"),
        ("Ann", "my main worry is the  deadline on the 14th", "2023-03-11T10:00:00Z"),
        ("Bob", "My main worry is the deadline on the 14th", "2023-03-12T10:00:00Z"),
        ("Ann", "My main worry is the deadline on the 21st", "2023-03-18T10:00:00Z"),
    ]
    sessions.append(
        chat.id, [NewMessage("user", text, sender=who, created_at=at) for who, text, at in said]
    )
    recaller = Recaller(
        RecallStore(storage.database), RecallSources(lambda: None, lambda c: []), UTC
    )
    await recaller.catch_up(chat.id)
    assert len(recaller.search(chat.id, RecallQuery("worry deadline", 10))) == 4

    lines = recaller.recalled(chat.id, "worry deadline", up_to_id=10**9, budget=2_000)
    shown = [(hit.speaker, hit.content.casefold().replace("  ", " ")) for hit in lines]
    assert sorted(shown) == [
        ("Ann", "my main worry is the deadline on the 14th"),  # once, not twice
        ("Ann", "my main worry is the deadline on the 21st"),
        ("Bob", "my main worry is the deadline on the 14th"),  # someone else saying it
    ]


@pytest.mark.parametrize(
    ("window", "floor"), [(4_096, SMALL_WINDOW_RECALL_FLOOR), (8_192, 0.0), (32_768, 0.0)]
)
def test_the_runtime_floors_recall_on_a_small_window_only(
    tmp_path: Path, window: int, floor: float
) -> None:
    config = make_config(tmp_path / "data", "http://127.0.0.1:9", llm={"context_window": window})
    runtime = build_runtime(config)
    try:
        [memory] = [e for e in runtime.extensions if isinstance(e, MemoryExtension)]
        assert memory.recall_floor is not None
        assert memory.recall_floor() == floor
    finally:
        runtime.close()

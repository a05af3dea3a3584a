"""The recall index's best-sentence re-score (issue 31): sentence vectors stored with each
message of two or more sentences (m0026), read from the store for the candidates alone at
search time (none held in process), used to re-order the first `SENTENCE_DEPTH`; forgotten
with their messages; rows indexed before m0026 rank by their whole text until the
background fill reaches them. Both engines."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pytest

from core.config import StorageConfig
from core.storage.engine import Storage, open_storage
from core.storage.migration import migrate_to_postgresql
from core.storage.stores import session_store
from memory import recall, recall_index
from memory.chat_data import export_recall
from memory.recall import Recaller, RecallSources
from memory.recall_index import RecallQuery, forget_cached, ranked_text
from memory.recall_store import RecallStore
from memory.sentence_vectors import best_cosines, pack_units, unpack_units
from memory.sentences import SENTENCE_DEPTH
from tests.conftest import make_config
from tests.memory.test_recall import said, until
from tests.reflector.test_state import open_old

UTC = ZoneInfo("UTC")


class CampEmbedder:
    """One dimension per known word ("camp" also for "tent"), one for anything else: a
    deterministic fake, not a mock. Counts the texts it embeds."""

    model_name = "camp-words"
    dim = 6
    words = (("camp", "tent"), ("library",), ("pottery",), ("hiking",), ("puppy",))

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        lower = text.lower()
        vector = [float(any(word in lower for word in group)) for group in self.words]
        return [*vector, 0.0] if any(vector) else [0.0] * 5 + [1.0]


# A: one sentence, about the camp among three other things (cosine 0.5 with "campsite").
# B: three sentences, the last one about the tent alone; its whole text names four other
#    things too (cosine 0.45), so without the re-score it ranks below A.
CAMP = [
    ("Ann", "We camped near the library, did pottery and went hiking.", "2023-03-04T10:00:00Z"),
    (
        "Ben",
        "The library had a puppy and a pottery class. Then we went hiking for hours."
        " At night we slept in a tent.",
        "2023-04-04T10:00:00Z",
    ),
    *[
        ("Cid", f"Nothing much to say on day {day}.", f"2023-05-{day:02d}T10:00:00Z")
        for day in range(1, 9)
    ],
]


def recaller_of(storage: Storage, embedder: CampEmbedder | None = None) -> Recaller:
    made = embedder or CampEmbedder()
    sources = RecallSources(lambda: made, lambda chat_id: [])
    return Recaller(RecallStore(storage.database), sources, UTC)


def first_speaker(recaller: Recaller, chat: int) -> str:
    return recaller.search(chat, RecallQuery("campsite", 3))[0].speaker


def held(recaller: Recaller, chat: int, ids: list[int]) -> dict[int, bytes | None]:
    """The messages of `ids` whose packed sentence vectors the store holds (not empty)."""
    return {i: value for i, value in recaller.store.sentence_vectors(chat, ids).items() if value}


class ReadCounting(RecallStore):
    """The real store, noting the ids of each `sentence_vectors` read."""

    def __init__(self, store: RecallStore) -> None:
        super().__init__(store.db)
        self.reads: list[list[int]] = []

    def sentence_vectors(self, chat_id: int, message_ids: Sequence[int]) -> dict[int, bytes | None]:
        self.reads.append(list(message_ids))
        return super().sentence_vectors(chat_id, message_ids)


async def test_a_long_messages_one_relevant_sentence_is_found(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = CampEmbedder()
    recaller = recaller_of(storage, embedder)
    chat = said(storage, "camp", CAMP)
    assert await recaller.catch_up(chat) == 10
    assert embedder.texts == 10 + 3  # B's three sentences; A and the fillers need none
    rows = {row.speaker: row for row in recaller.store.rows(chat, sentences=True)}
    assert len(rows["Ben"].sentences or b"") == 3 * 6 * 2  # three float16 unit vectors
    assert rows["Ann"].sentences == b""  # one sentence: its whole text's vector is enough
    assert first_speaker(recaller, chat) == "Ben"
    monkeypatch.setattr(recall_index, "SENTENCES", False)
    assert first_speaker(recaller, chat) == "Ann"  # drowned without the re-score


async def test_forgetting_removes_the_sentence_vectors(storage: Storage) -> None:
    recaller = recaller_of(storage)
    chat = said(storage, "camp", CAMP)
    await recaller.catch_up(chat)
    ids = [row.message_id for row in recaller.store.rows(chat)]
    assert len(held(recaller, chat, ids)) == 1
    assert recaller.forget_chat(chat) == 10
    assert recaller.store.sentence_vectors(chat, ids) == {}
    sessions = session_store(storage)
    assert recaller.store.without_sentences(chat, 100) == []
    # a chat's messages deleted (forget-me) take their recall rows and sentences with them
    again = said(storage, "again", CAMP[:2])
    await recaller.catch_up(again)
    ids = [row.message_id for row in recaller.store.rows(again)]
    assert len(held(recaller, again, ids)) == 1
    assert sessions.delete_chat(again) == 2  # its messages
    forget_cached(recaller.store, again)
    assert recaller.store.rows(again) == []
    assert recaller.store.sentence_vectors(again, ids) == {}


async def test_rows_indexed_before_m0026_rank_then_get_filled(storage: Storage) -> None:
    recaller = recaller_of(storage)
    chat = said(storage, "camp", CAMP)
    await recaller.catch_up(chat)
    storage.database.write("UPDATE message_recall SET sentence_vectors = NULL")  # as before
    ids = [row.message_id for row in recaller.store.rows(chat)]
    assert set(recaller.store.sentence_vectors(chat, ids).values()) == {None}
    assert first_speaker(recaller, chat) == "Ann"  # ranks by whole texts, as before m0026
    assert len(recaller.store.without_sentences(chat, 100)) == 10
    assert await recaller.fill_sentences(chat) == 10
    assert recaller.store.without_sentences(chat, 100) == []
    assert len(held(recaller, chat, ids)) == 1
    assert first_speaker(recaller, chat) == "Ben"  # the next search read them
    assert await recaller.fill_sentences(chat) == 0
    records = export_recall(recaller, session_store(storage).get_or_create_chat("terminal", "camp"))
    assert sorted(r["sentence_vectors"] for r in records.records) == [0] * 9 + [3]


async def test_the_background_job_fills_an_old_chat_batch_by_batch(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    recaller = recaller_of(storage)
    chat = said(storage, "camp", CAMP)
    await recaller.catch_up(chat)
    storage.database.write("UPDATE message_recall SET sentence_vectors = NULL")  # as before
    monkeypatch.setattr(recall, "BATCH", 4)  # 10 rows: three batches, re-queued in turn
    job = asyncio.create_task(recaller.serve())
    try:
        await until(lambda: recaller._queue is not None)
        recaller.catch_up_later(chat)
        await until(lambda: not recaller.store.without_sentences(chat, 1))
    finally:
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
    assert first_speaker(recaller, chat) == "Ben"


def test_packed_units_round_trip_and_another_size_is_ignored() -> None:
    [one, none] = pack_units([[3.0, 4.0], [0.0, 2.0]], [2, 0])
    assert none == b""
    rows = unpack_units(one, 2)
    assert rows is not None and rows.shape == (2, 2)
    assert abs(float(rows[0][0]) - 0.6) < 1e-3  # unit vectors
    assert unpack_units(one, 3) is None and unpack_units(None, 2) is None
    query = np.asarray([0.0, 1.0], np.float32)
    best = best_cosines(query, [7, 8, 9], {7: 0.1, 8: 0.1}, {7: one, 8: None, 9: b""})
    assert abs(best[7] - 1.0) < 1e-3 and best[8] == 0.1 and 9 not in best
    wide = np.asarray([0.0, 1.0, 0.0], np.float32)  # another model's size: whole texts only
    assert best_cosines(wide, [7], {7: 0.1}, {7: one}) == {7: 0.1}


async def test_m0026_keeps_an_old_index_which_ranks_then_fills(blank_storage_url: str) -> None:
    """A database indexed before m0026: its rows gain an empty column (NULL), rank by their
    whole text, and the fill gives them their sentences."""
    old = open_old(blank_storage_url, upto=25)
    chat = said(old, "camp", CAMP)
    embedder = CampEmbedder()
    for row in RecallStore(old.database).unindexed(chat, 100):
        vector = np.asarray(embedder.embed([ranked_text(row, UTC)])[0], np.float32).tobytes()
        old.database.write(
            "INSERT INTO message_recall (message_id, chat_id, embedding, model)"
            " VALUES (?, ?, ?, ?)",
            (row.message_id, chat, vector, embedder.model_name),
        )
    old.close()
    new = open_storage(StorageConfig(url=blank_storage_url))
    try:
        recaller = recaller_of(new, embedder)
        assert {row.sentences for row in recaller.store.rows(chat, sentences=True)} == {None}
        assert first_speaker(recaller, chat) == "Ann"  # as before: whole texts only
        assert await recaller.fill_sentences(chat) == 10
        assert first_speaker(recaller, chat) == "Ben"
    finally:
        new.close()


async def test_storage_migrate_copies_the_sentence_vectors(
    tmp_path: Path, fresh_postgres_url: str
) -> None:
    """`mnemo storage migrate` copies `message_recall` with its sentence vectors."""
    config = make_config(tmp_path / "data", "http://127.0.0.1:9")
    sqlite = open_storage(config.storage)
    chat = said(sqlite, "camp", CAMP)
    await recaller_of(sqlite).catch_up(chat)
    before = [
        (row.message_id, row.sentences)
        for row in RecallStore(sqlite.database).rows(chat, sentences=True)
    ]
    sqlite.close()
    migrate_to_postgresql(config, fresh_postgres_url)
    postgres = open_storage(StorageConfig(url=fresh_postgres_url))
    try:
        recaller = recaller_of(postgres)
        after = [
            (row.message_id, row.sentences) for row in recaller.store.rows(chat, sentences=True)
        ]
        assert after == before and sum(bool(units) for _, units in after) == 1
        assert first_speaker(recaller, chat) == "Ben"
    finally:
        postgres.close()


async def test_a_search_reads_its_candidates_sentences_alone(storage: Storage) -> None:
    """The read is of the chat's own rows (by chat and id), of the first `SENTENCE_DEPTH`
    candidates at most, once per search; nothing of it is kept between searches."""
    recaller = recaller_of(storage)
    chat = said(storage, "camp", CAMP)
    other = said(storage, "other", CAMP[:2])
    await recaller.catch_up(chat)
    await recaller.catch_up(other)
    theirs = [row.message_id for row in recaller.store.rows(other)]
    assert recaller.store.sentence_vectors(chat, theirs) == {}  # another chat's rows
    assert len(recaller.store.sentence_vectors(other, theirs)) == 2
    assert recaller.store.sentence_vectors(chat, []) == {}
    counting = ReadCounting(recaller.store)
    recaller.store = counting
    assert first_speaker(recaller, chat) == "Ben"
    assert first_speaker(recaller, chat) == "Ben"
    assert len(counting.reads) == 2 and all(len(ids) <= SENTENCE_DEPTH for ids in counting.reads)
    assert set(counting.reads[0]) <= {row.message_id for row in recaller.store.rows(chat)}

"""Episodic recall: the index of every stored message (both engines), the recalled section,
`conversation_search`, and forgetting (tombstones, forget-me)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import date
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, echo_responder, tool_call
from core.context.summary import is_summary_request
from core.storage.engine import Storage
from core.storage.store import NewMessage
from core.storage.stores import session_store
from memory.chat_cache import is_cached
from memory.extension import MemoryExtension
from memory.keyword_cache import KEYWORD_LISTS
from memory.recall import Recaller, RecallSources
from memory.recall_index import ChatRecall, RecallQuery, _fits, chat_recall
from memory.recall_store import RecallRow, RecallStore
from memory.store import Tombstone
from memory.stores import memory_store
from memory.vector_cache import CHAT_VECTORS
from memory.warm_up import warm_memories

UTC = ZoneInfo("UTC")


def bare_recaller(storage: Storage, tombstones: list[Tombstone] | None = None) -> Recaller:
    """A recaller without an embedding model (BM25 only), as when none could be loaded."""
    sources = RecallSources(lambda: None, lambda chat_id: list(tombstones or []))
    return Recaller(RecallStore(storage.database), sources, UTC)


def said(storage: Storage, external: str, lines: list[tuple[str, str, str]]) -> int:
    """Store (speaker, text, UTC time) messages in a chat; return the chat's id."""
    sessions = session_store(storage)
    chat = sessions.get_or_create_chat("terminal", external)
    sessions.append(
        chat.id, [NewMessage("user", text, sender=who, created_at=at) for who, text, at in lines]
    )
    return chat.id


DINNERS = [
    ("Ann", "We had dinner at Trattoria Sole, the pasta was great", "2023-03-04T19:00:00.000Z"),
    ("Bob", "I went hiking near Sintra with my brother", "2023-05-08T10:00:00.000Z"),
    ("Ann", "The new job at the library starts on Monday", "2023-06-01T09:00:00.000Z"),
]


async def test_every_message_is_indexed_searched_by_date_and_forgotten(storage: Storage) -> None:
    recaller = bare_recaller(storage)
    ann = said(storage, "ann", DINNERS)
    other = said(storage, "other", [("Eve", "Trattoria Sole is closed", "2023-03-05T10:00:00Z")])
    assert await recaller.catch_up(ann) == 3
    assert await recaller.catch_up(ann) == 0  # nothing new
    [hit] = recaller.search(ann, RecallQuery("which restaurant trattoria?", 1))
    assert (hit.speaker, hit.day) == ("Ann", date(2023, 3, 4))
    assert "Trattoria Sole" in hit.content
    found = recaller.search(ann, RecallQuery("trattoria hiking library", 10))
    assert {h.content for h in found} == {text for _, text, _ in DINNERS}  # never Eve's chat
    may = RecallQuery("trattoria hiking library", 10, date(2023, 5, 1), date(2023, 5, 31))
    assert [h.speaker for h in recaller.search(ann, may)] == ["Bob"]
    anns = RecallQuery("trattoria hiking library", 10, speaker="ann")
    assert {h.speaker for h in recaller.search(ann, anns)} == {"Ann"}

    said(storage, "ann", [("Bob", "The library cat is called Tom", "2023-06-02T09:00:00Z")])
    await recaller.catch_up(ann)
    assert len(chat_recall(recaller.store, ann)) == 4  # appended to the copy in process
    assert any("cat" in h.content for h in recaller.search(ann, RecallQuery("library cat", 3)))

    assert recaller.forget_chat(ann) == 4
    assert recaller.search(ann, RecallQuery("trattoria", 5)) == []
    assert recaller.store.count(ann) == 0
    await recaller.catch_up(other)
    assert recaller.store.count(other) == 1  # the other chat keeps its index


async def test_a_message_saying_a_forgotten_memory_is_never_recalled(storage: Storage) -> None:
    stone = Tombstone(1, None, 9, "Ann had dinner at Trattoria Sole", "Ann", "Ann", "")
    recaller = bare_recaller(storage, [stone])
    ann = said(storage, "ann", DINNERS)
    await recaller.catch_up(ann)
    hits = recaller.search(ann, RecallQuery("dinner trattoria pasta hiking", 5))
    assert hits and all("Trattoria" not in hit.content for hit in hits)


def summaries_and_echo(request: dict[str, Any]) -> FakeReply:
    if is_summary_request(request["messages"]):
        return FakeReply("## Goal\nChat.\n## Critical context\nnone")
    return echo_responder(request)


def memory_ext(runtime: Runtime) -> MemoryExtension:
    [found] = [e for e in runtime.agent.extensions if isinstance(e, MemoryExtension)]
    return found


def inbound(text: str, sent_at: str = "", chat: str = "c1") -> Inbound:
    return Inbound("terminal", chat, text, sender_id="u1", sender_name="Alice", sent_at=sent_at)


def recalled_block(request: dict[str, Any]) -> str:
    text = "\n".join(str(m.get("content")) for m in request["messages"])
    if "<recalled" not in text:
        return ""
    return text.split("<recalled", 1)[1].split("</recalled>", 1)[0]


async def test_compacted_messages_come_back_recalled_with_their_date(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = summaries_and_echo
    await runtime.agent.handle(
        inbound("we ate at Trattoria Sole last night", "2023-03-04T19:00:00.000Z")
    )
    for number in range(8):
        weather = f"filler message {number} about the weather. " + "It rains, then not. " * 80
        await runtime.agent.handle(inbound(weather))
    await runtime.agent.handle(inbound("/compact"))  # indexes what it compacts first
    await runtime.agent.handle(inbound("which trattoria did we eat at?"))
    block = recalled_block(fake_llm.requests[-1])
    assert "[4 March 2023] Alice: we ate at Trattoria Sole last night (#" in block
    assert "which trattoria" not in block  # what the window shows is not recalled
    context = await runtime.agent.handle(inbound("/context"))
    assert context is not None and "recalled" in context.text


async def test_a_remember_exchange_is_not_recalled_its_memory_is_shown(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """`remember: …` and its "Noted." are a memory of their own: the memories section shows
    it, so the recalled section does not spend its budget repeating them."""
    fake_llm.responder = summaries_and_echo
    await runtime.agent.handle(inbound("remember: our trattoria is Trattoria Sole"))
    await runtime.agent.handle(inbound("we ate at Trattoria Sole last night"))
    for number in range(8):
        weather = f"filler message {number} about the weather. " + "It rains, then not. " * 80
        await runtime.agent.handle(inbound(weather))
    await runtime.agent.handle(inbound("/compact"))
    await runtime.agent.handle(inbound("which trattoria did we eat at?"))
    block = recalled_block(fake_llm.requests[-1])
    assert "we ate at Trattoria Sole last night" in block
    assert "remember:" not in block and "Noted." not in block
    text = "\n".join(str(m.get("content")) for m in fake_llm.requests[-1]["messages"])
    assert "our trattoria is Trattoria Sole" in text.split("<recalled", 1)[0]  # a memory


async def test_conversation_search_finds_old_messages_by_day(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await runtime.agent.handle(inbound("my sister Ana moved to Porto", "2023-05-08T10:00:00Z"))
    await runtime.agent.handle(inbound("Ana loves Porto's bridges", "2023-07-01T10:00:00Z"))
    args = {"query": "Ana Porto", "since": "2023-05-01", "until": "2023-05-31"}
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("conversation_search", args, "call_1")]),
        FakeReply("done"),
    )
    await runtime.agent.handle(inbound("where did Ana move in May?"))
    [result] = [m for m in fake_llm.requests[-1]["messages"] if m.get("role") == "tool"]
    assert result["content"].startswith("[8 May 2023] Alice: my sister Ana moved to Porto (#")
    assert "bridges" not in result["content"]
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("conversation_search", {"query": ""}, "call_2")]),
        FakeReply("done"),
    )
    await runtime.agent.handle(inbound("search nothing"))
    [bad] = [m for m in fake_llm.requests[-1]["messages"] if m.get("tool_call_id") == "call_2"]
    assert "query" in bad["content"]  # a clear error, and the chat goes on


async def test_forget_chat_deletes_its_recall_index(runtime: Runtime) -> None:
    await runtime.agent.handle(inbound("my locker code is A113"))
    extension = memory_ext(runtime)
    recaller = extension.recaller
    assert recaller is not None
    chat = runtime.store.get_or_create_chat("terminal", "c1")
    await recaller.catch_up(chat.id)
    assert recaller.store.count(chat.id) >= 2  # the message and the reply
    gone = extension.forget_chat(chat)
    assert gone["messages in the recall index"] >= 2
    assert recaller.store.count(chat.id) == 0
    assert recaller.search(chat.id, RecallQuery("locker code", 5)) == []


async def until(check: Any, seconds: float = 30.0) -> None:
    for _ in range(int(seconds * 20)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("timed out")


async def test_the_background_job_warms_up_at_start_and_indexes_after_turns(
    runtime: Runtime,
) -> None:
    extension = memory_ext(runtime)
    recaller = extension.recaller
    assert recaller is not None
    await runtime.agent.handle(inbound("my favourite tea is sencha"))
    chat = runtime.store.get_or_create_chat("terminal", "c1")
    assert recaller.store.count(chat.id) == 0  # no job running: nothing indexed yet
    [service] = extension.services()
    job = asyncio.create_task(service.run())
    try:
        await until(lambda: recaller.store.count(chat.id) == 2)  # warm-up indexed it
        await runtime.agent.handle(inbound("and my cat is called Miso"))  # queued after it
        await until(lambda: recaller.store.count(chat.id) == 4)
    finally:
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job


async def test_warm_up_builds_a_chats_keyword_lists_before_its_first_query(
    storage: Storage,
) -> None:
    store = memory_store(storage)
    chat = said(storage, "ann", DINNERS)
    store.add(chat, "Ann's favourite tea is sencha", "PROFILE", source="t")
    assert not is_cached(store, chat, KEYWORD_LISTS)
    assert await warm_memories(store, chat) == 1
    assert is_cached(store, chat, KEYWORD_LISTS)
    assert not is_cached(store, chat, CHAT_VECTORS)  # no embedding model: no vectors to hold


def test_vectors_of_an_older_model_are_never_mixed_in() -> None:
    def row(message_id: int, dims: int) -> RecallRow:
        vector = np.ones(dims, dtype=np.float32).tobytes()
        return RecallRow(message_id, "user", "Ann", f"text {message_id}", "2023-05-08", vector)

    index = ChatRecall.build([row(1, 3), row(2, 3), row(3, 4)], UTC)
    assert len(index.vectors) == 1 and len(index) == 3  # only the newest model's vector
    assert not _fits(index, [row(4, 3)]) and _fits(index, [row(4, 4)])


class WordEmbedder:
    """A tiny deterministic embedder: one dimension per known word (a fake, not a mock)."""

    model_name = "words"
    dim = 4
    words = ("puppy", "pottery", "hiking", "library")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = [float(word in text.lower()) for word in self.words]
        return vector if any(vector) else [0.1] * self.dim


async def test_vectors_are_stored_and_ranked_on_both_engines(storage: Storage) -> None:
    sources = RecallSources(lambda: WordEmbedder(), lambda chat_id: [])
    recaller = Recaller(RecallStore(storage.database), sources, UTC)
    ann = said(storage, "ann", DINNERS)
    await recaller.catch_up(ann)
    rows = recaller.store.rows(ann)
    assert [len(row.embedding or b"") for row in rows] == [16, 16, 16]
    [hit] = recaller.search(ann, RecallQuery("a walk in the hills (hiking)", 1))
    assert hit.speaker == "Bob"


async def test_reindex_rebuilds_the_recall_index_from_the_messages(storage: Storage) -> None:
    recaller = bare_recaller(storage)
    ann = said(storage, "ann", DINNERS)
    bob = said(storage, "bob", DINNERS[:1])
    await recaller.catch_up(ann)
    assert await recaller.rebuild() == 4  # both chats, from scratch
    assert (recaller.store.count(ann), recaller.store.count(bob)) == (3, 1)
    assert recaller.search(bob, RecallQuery("trattoria", 1))

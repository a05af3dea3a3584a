"""The `DashboardStore` contract on both engines (`storage`): what the pages read, written
through the packages' own stores, gives the same answers on SQLite and PostgreSQL."""

from __future__ import annotations

from bots.web.dashboard_store import DatabaseDashboardStore
from core.api import Chat, Inbound
from core.storage.engine import Storage
from core.storage.store import CompactionRecord, NewMessage
from core.storage.stores import delivery_store, session_store
from memory.stores import memory_store
from reflector.store import ChatRun
from reflector.stores import run_store

EVER = "2000-01-01"


def chat_with(storage: Storage, name: str, texts: list[str], title: str = "") -> Chat:
    sessions = session_store(storage)
    chat = sessions.get_or_create_chat("terminal", name, title=title)
    if texts:
        sessions.append(chat.id, [NewMessage("user", text, sender=name.title()) for text in texts])
    return chat


def test_chats_newest_activity_first_with_their_figures_and_search(storage: Storage) -> None:
    quiet = chat_with(storage, "quiet", [], title="Nobody here")
    ann = chat_with(storage, "ann", ["hello", "my cat is Miso"], title="Ann")
    bob = chat_with(storage, "bob", ["hi", "there", "again"], title="Bob 50%_")
    memories = memory_store(storage)
    memories.add(ann.id, "my cat is called Miso", "PROFILE", source="test")
    archived = memories.add(ann.id, "my cat was called Tom", "PROFILE", source="test")
    memories.archive(archived)
    store = DatabaseDashboardStore(storage.database)

    listed = store.chat_overviews("", limit=10, offset=0)
    assert [c.id for c in listed] == [bob.id, ann.id, quiet.id]  # no messages: last
    assert [c.id for c in store.chat_overviews("", limit=1, offset=1)] == [ann.id]
    by_id = {c.id: c for c in listed}
    assert (by_id[ann.id].messages, by_id[ann.id].memories) == (2, 1)
    assert by_id[bob.id].key == "terminal:bob" and by_id[bob.id].title == "Bob 50%_"
    assert by_id[quiet.id].last_activity == "" and by_id[quiet.id].session_tokens == 0
    newest = session_store(storage).history(bob.id)[-1]
    assert by_id[bob.id].last_activity == newest.created_at
    tokens = sum(m.token_estimate for m in session_store(storage).history(bob.id))
    assert by_id[bob.id].session_tokens == tokens > 0
    assert store.chat_overview(ann.id) == by_id[ann.id]
    assert store.chat_overview(999_999) is None

    for search, expected in [
        ("ann", [ann.id]),
        ("TERMINAL:BO", [bob.id]),
        ("50%_", [bob.id]),  # LIKE's wildcards are literal
        ("0%", [bob.id]),
        (str(quiet.id), [quiet.id]),
        ("nothing like it", []),
        ("²", []),  # a digit to str.isdigit, not a number to int()
    ]:
        assert [c.id for c in store.chat_overviews(search, 10, 0)] == expected, search
        assert store.count_chats(search) == len(expected), search
    assert store.count_chats("") == 3


def test_a_conversation_pages_backwards_oldest_first(storage: Storage) -> None:
    chat = chat_with(storage, "ann", [f"message {n}" for n in range(5)])
    chat_with(storage, "bob", ["Bob's own"])
    store = DatabaseDashboardStore(storage.database)
    newest = store.conversation(chat.id, None, 2)
    assert [e.content for e in newest] == ["message 3", "message 4"]
    older = store.conversation(chat.id, newest[0].id, 10)
    assert [e.content for e in older] == ["message 0", "message 1", "message 2"]
    assert older[0].role == "user" and older[0].sender == "Ann" and older[0].tool_calls == ""
    assert older[0].compaction_id is None
    assert store.conversation(chat.id, older[0].id, 10) == []
    assert store.chat_person(chat.id) == "Ann"
    assert store.chat_person(chat_with(storage, "quiet", []).id) == ""


def test_provenance_finds_the_run_the_asking_message_and_the_supersede_links(
    storage: Storage,
) -> None:
    chat = chat_with(storage, "ann", ["remember: my cat is called Miso"])
    [asked] = session_store(storage).history(chat.id)
    memories = memory_store(storage)
    run = ChatRun(chat.id, first_message_id=asked.id, last_message_id=asked.id)
    old = memories.add(chat.id, "my cat is called Tom", "PROFILE", source="test")
    new = memories.add(chat.id, "my cat is called Miso", "PROFILE", source="reflector")
    run.ok, run.status = True, "done"
    run_id = run_store(storage).record(run)  # finished now: its span holds both memories
    memories.supersede(old, new)
    store = DatabaseDashboardStore(storage.database)

    made = memories.get(new)
    assert made is not None
    found = store.provenance(chat.id, new, made.created_at)
    assert (found.run_id, found.run_first_message_id, found.run_last_message_id) == (
        run_id,
        asked.id,
        asked.id,
    )
    assert (found.message_id, found.message_text) == (asked.id, asked.content)
    assert (found.supersedes, found.superseded_by) == ([old], [])
    assert store.provenance(chat.id, old, made.created_at).superseded_by == [new]

    before = store.provenance(chat.id, new, "1999-01-01T00:00:00.000Z")
    assert (before.run_id, before.message_id, before.message_text) == (None, None, "")
    everyone = memories.add(None, "the office is in Porto", "KNOWLEDGE", source="test")
    global_memory = memories.get(everyone)
    assert global_memory is not None
    nowhere = store.provenance(None, everyone, global_memory.created_at)
    assert (nowhere.run_id, nowhere.message_id, nowhere.supersedes) == (None, None, [])


def test_counts_per_day_for_the_pictures_and_the_queue(storage: Storage) -> None:
    ann = chat_with(storage, "ann", ["one", "two", "three"])
    bob = chat_with(storage, "bob", ["one"])
    sessions = session_store(storage)
    sessions.record_usage(ann.id, "turn", "small", 100, 20, 5)
    sessions.record_usage(ann.id, "turn", "small", 50, 5, 5)
    sessions.record_usage(bob.id, "reflector", "large", 30, None, 5)
    memories = memory_store(storage)
    for text in ("my cat is called Miso", "my sister lives in Porto"):
        memories.add(ann.id, text, "PROFILE", source="test")
    memories.add(bob.id, "my cat is called Felix", "PROFILE", source="test")
    runs = run_store(storage)
    runs.record(ChatRun(ann.id, ok=True, status="done"))
    runs.record(ChatRun(ann.id, status="failed", error="timed out"))
    runs.record(ChatRun(bob.id, status="failed", error="Bob's"))
    history = sessions.history(ann.id)
    first, last, today = history[0].id, history[-1].id, history[0].created_at[:10]
    sessions.record_compaction(
        ann.id, CompactionRecord("command", "summarised", first, last, 3, 90, 30, 1, "", "S")
    )
    inbound = Inbound("terminal", "bob", "are you there?", "u-bob", "Bob", message_id="m-1")
    delivery_store(storage).receive(bob, inbound)
    store = DatabaseDashboardStore(storage.database)

    by_kind = {(d.day, d.series): d.value for d in store.tokens_per_day(EVER, "kind")}
    assert by_kind == {(today, "turn"): 175, (today, "reflector"): 30}
    by_model = {(d.day, d.series): d.value for d in store.tokens_per_day(EVER, "model")}
    assert by_model == {(today, "small"): 175, (today, "large"): 30}
    assert store.tokens_per_day("9999-01-01", "kind") == []
    assert [(d.day, d.series, d.value) for d in store.memories_per_day(ann.id, EVER)] == [
        (today, "added", 2)
    ]
    assert [d.value for d in store.memories_per_day(None, EVER)] == [3]
    assert store.memories_before(ann.id, "9999-01-01") == 2
    assert store.memories_before(None, "9999-01-01") == 3
    assert store.memories_before(None, EVER) == 0
    runs_of_ann = {(d.day, d.series): d.value for d in store.reflector_runs_per_day(ann.id, EVER)}
    assert runs_of_ann == {(today, "done"): 1, (today, "failed"): 1}
    assert sum(d.value for d in store.reflector_runs_per_day(None, EVER)) == 3
    assert [(d.series, d.value) for d in store.compactions_per_day(ann.id, EVER)] == [
        ("command", 1)
    ]
    assert store.compactions_per_day(bob.id, EVER) == []
    [mark] = store.compaction_marks(ann.id)
    assert (mark.trigger, mark.status, mark.first_message_id, mark.last_message_id) == (
        "command",
        "summarised",
        first,
        last,
    )
    assert (mark.messages_compacted, mark.tokens_before, mark.tokens_after) == (3, 90, 30)
    assert store.compaction_marks(bob.id) == []
    depth = store.queue_depth()
    assert (depth.pending_messages, depth.undelivered_replies) == (1, 0)

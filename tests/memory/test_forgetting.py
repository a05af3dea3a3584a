"""Forget means forget: a tombstone keeps the reflector (and the memory tool) from bringing
a forgotten fact back, while other facts are still learned; clear replies for bad ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.model.client import OpenAILLM
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from memory.embeddings import Embedder
from memory.forgetting import (
    fact_terms,
    repeated_tombstone,
    repeats_by_terms,
    repeats_by_words,
    texts_to_embed,
    third_person,
)
from memory.memory_store import DatabaseMemoryStore
from memory.store import Tombstone
from migrations import migrate
from reflector.extension import ReflectorExtension
from reflector.facts import FactWriter, PreparedFact
from reflector.stores import sqlite_reflector
from tests.conftest import run_mnemo, write_config
from tests.memory.conftest import Engine
from tests.memory.test_extension import chat_id_of, memory_ext, run_tool


def said(text: str, chat: str = "c1") -> Inbound:
    return Inbound("terminal", chat, text, sender_id="u1", sender_name="Alice")


def tombstone(content: str, speaker: str = "Alice") -> Tombstone:
    return Tombstone(1, 1, 3, content, speaker, "Alice (terminal:u1)", "2026-01-01T00:00:00Z")


def facts(*contents: str) -> FakeReply:
    items = [{"content": content, "category": "PROFILE"} for content in contents]
    return FakeReply(json.dumps({"memories": items}))


async def remember_then_forget(runtime: Runtime, text: str) -> int:
    noted = await runtime.agent.handle(said(f"remember: {text}"))
    assert noted is not None and noted.text.startswith("Noted.")
    [memory] = memory_ext(runtime).keeper.store.list(chat_id_of(runtime, "c1"))
    forgot = await runtime.agent.handle(said(f"/forget {memory.id}"))
    assert forgot is not None and forgot.text == f"Forgotten: #{memory.id} {text}"
    return memory.id


def contents(runtime: Runtime) -> list[str]:
    store = memory_ext(runtime).keeper.store
    return [m.content for m in store.list(chat_id_of(runtime, "c1"), include_global=False)]


def test_a_fact_in_the_first_person_reads_as_the_speakers() -> None:
    assert third_person("I'm a nurse and my cat is Miso", "Ann") == (
        "the user is a nurse and the user's cat is Miso"
    )
    assert fact_terms("I like jazz", "Alice") == fact_terms("Alice likes jazz", "Alice")
    assert fact_terms("I like jazz", "Alice") == fact_terms("The user likes jazz", "Alice")
    forgotten = tombstone("I like jazz")
    assert repeats_by_words("Alice likes jazz", forgotten)
    assert not repeats_by_words("Alice dislikes jazz", forgotten)  # a new word: a new fact
    assert not repeats_by_words("Bob likes jazz", forgotten)  # someone else
    assert not repeats_by_words("Alice likes jazz and blues", forgotten)


def test_the_embedding_test_catches_a_paraphrase_the_words_miss(embedder: Embedder) -> None:
    forgotten = [tombstone("I like jazz")]
    paraphrase, other = "Alice really likes jazz", "Alice likes blues"
    assert repeated_tombstone(paraphrase, forgotten) is None  # "really" is a new word
    texts = texts_to_embed([paraphrase, other], forgotten)
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))
    assert repeated_tombstone(paraphrase, forgotten, vectors) == forgotten[0]
    assert repeated_tombstone(other, forgotten, vectors) is None


def test_distinctive_terms_catch_a_rewording_the_words_miss() -> None:
    secret = tombstone("my secret phrase is ZEBRAQUARTZ lighthouse", speaker="you")
    reworded = "Alice's secret phrase is ZEBRAQUARTZ lighthouse"
    assert not repeats_by_words(reworded, secret)  # "Alice" is not "you": a new word
    assert repeats_by_terms(reworded, secret)
    assert repeats_by_terms("The words zebraquartz lighthouse are Alice's secret", secret)
    assert not repeats_by_terms("Alice's secret is safe with her sister", secret)
    sister = tombstone("my sister is called Ana", speaker="you")
    assert repeats_by_terms("Alice's sister is called Ana", sister)
    assert not repeats_by_terms("Ana is a pilot", sister)  # the name, little else
    assert not repeats_by_terms("Alice's brother is called Rui", sister)
    assert not repeats_by_terms("Alice's cat likes tuna", tombstone("I am Alice", "Alice"))


async def test_the_memory_tool_refuses_a_paraphrase_by_meaning(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    memory_id = await remember_then_forget(runtime, "I like jazz")
    back = await run_tool(
        runtime, fake_llm, "c1", "structured_memory_add", {"content": "Alice really likes jazz"}
    )
    assert back.startswith(f"error: not stored: it repeats memory #{memory_id}")
    other = await run_tool(
        runtime, fake_llm, "c1", "structured_memory_add", {"content": "Alice likes blues"}
    )
    assert other.startswith("saved memory #")


async def test_a_forgotten_fact_is_not_learned_again_but_a_new_one_is(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    memory_id = await remember_then_forget(runtime, "I like jazz")
    [grave] = memory_ext(runtime).keeper.store.tombstones(chat_id_of(runtime, "c1"))
    assert (grave.memory_id, grave.content, grave.speaker) == (memory_id, "I like jazz", "Alice")
    assert grave.forgotten_by == "Alice (terminal:u1)" and grave.forgotten_at
    reflector = next(e for e in runtime.agent.extensions if isinstance(e, ReflectorExtension))
    await runtime.agent.handle(said("my cat is called Miso"))  # facts must be grounded
    fake_llm.add(
        facts(
            "Alice likes jazz",
            "The user likes jazz",
            "Alice really likes jazz",
            "Alice's cat is called Miso",
        )
    )
    report = await reflector.reflector.run_pass()
    assert report.ok, report.lines()
    assert "I like jazz" in json.dumps(fake_llm.requests[-1])  # the message is still there
    assert contents(runtime) == ["Alice's cat is called Miso"]
    [run] = report.runs
    assert "3 forgotten facts not learned again" in run.notes


async def test_keyword_only_the_reflector_still_skips_a_forgotten_fact(
    runtime: Runtime, config: Config, fake_llm: FakeOpenAIServer
) -> None:
    await remember_then_forget(runtime, "my sister is called Ana")
    await runtime.agent.handle(said("my brother is called Rui"))  # facts must be grounded
    conn = connect(config.storage.database_path)
    try:
        plain = sqlite_reflector(
            config, conn, OpenAILLM(config.llm), memories=DatabaseMemoryStore(SqliteDatabase(conn))
        )
        fake_llm.add(facts("Alice's sister is called Ana", "Alice's brother is called Rui"))
        report = await plain.run_pass()
    finally:
        conn.close()
    assert report.ok, report.lines()
    assert contents(runtime) == ["Alice's brother is called Rui"]


async def test_remember_again_lifts_the_tombstone(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await remember_then_forget(runtime, "I like jazz")
    again = await runtime.agent.handle(said("remember: I like jazz"))
    assert again is not None and again.text.startswith("Noted.")
    assert contents(runtime) == ["I like jazz"]
    assert memory_ext(runtime).keeper.store.tombstones(chat_id_of(runtime, "c1")) == []


async def test_the_memory_tools_forget_with_a_tombstone_and_refuse_to_bring_it_back(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    store = memory_ext(runtime).keeper.store
    saved = await run_tool(
        runtime, fake_llm, "c1", "structured_memory_add", {"content": "Alice plays the cello"}
    )
    [memory] = store.list(chat_id_of(runtime, "c1"))
    assert saved == f"saved memory #{memory.id}"
    deleted = await run_tool(runtime, fake_llm, "c1", "structured_memory_delete", {"id": memory.id})
    assert deleted == f"deleted memory #{memory.id}"
    [grave] = store.tombstones(chat_id_of(runtime, "c1"))
    assert grave.content == "Alice plays the cello"
    back = await run_tool(
        runtime, fake_llm, "c1", "structured_memory_add", {"content": "Alice plays cello"}
    )
    assert back.startswith(f"error: not stored: it repeats memory #{memory.id}, which Alice")
    assert store.list(chat_id_of(runtime, "c1")) == []
    huge = await run_tool(runtime, fake_llm, "c1", "structured_memory_delete", {"id": 10**22})
    assert huge.startswith("error: 10000000000000000000000 is not a memory id")


@pytest.mark.parametrize(
    ("command", "reply"),
    [
        (
            "/forget 99999999999999999999999",
            "Not forgotten: 99999999999999999999999 is not a memory id: ids are whole numbers"
            " from 1 to 9,223,372,036,854,775,807.",
        ),
        ("/forget abc", "Not forgotten: 'abc' is not a memory id: give the #number /memory shows."),
        ("/forget #-3", "Not forgotten: '#-3' is not a memory id: give the #number /memory shows."),
        ("/forget ²", "Not forgotten: '²' is not a memory id: give the #number /memory shows."),
        ("/forget", "Usage: /forget ID (the #number shown by /memory)"),
    ],
)
async def test_bad_ids_get_their_own_clear_reply(
    runtime: Runtime, command: str, reply: str
) -> None:
    answer = await runtime.agent.handle(said(command))
    assert answer is not None and answer.text == reply


async def test_another_chats_memory_cannot_be_forgotten_and_its_existence_stays_hidden(
    runtime: Runtime,
) -> None:
    await runtime.agent.handle(said("remember: my dog is called Rex", "bob"))
    [theirs] = memory_ext(runtime).keeper.store.list(chat_id_of(runtime, "bob"))
    answer = await runtime.agent.handle(said(f"/forget {theirs.id}"))
    missing = await runtime.agent.handle(said(f"/forget {theirs.id + 100}"))
    assert (
        answer is not None and answer.text == f"Not forgotten: no memory #{theirs.id} in this chat."
    )
    assert missing is not None and missing.text.endswith(f"#{theirs.id + 100} in this chat.")
    assert memory_ext(runtime).keeper.store.get(theirs.id) is not None


def test_the_cli_forgets_with_a_tombstone_and_refuses_huge_ids(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    added = run_mnemo(["memory", "add", "--chat", "terminal:c1", "Ana likes green tea"], config)
    assert added.returncode == 0, added.stderr
    secret = run_mnemo(["memory", "add", "--chat", "terminal:c1", "my pin is 4821"], config)
    assert secret.returncode != 0 and "it looks like a password" in secret.stderr
    huge = run_mnemo(["memory", "forget", "--chat", "terminal:c1", "9" * 23], config)
    assert huge.returncode == 2 and "Traceback" not in huge.stderr and "range" in huge.stderr
    forgot = run_mnemo(["memory", "forget", "--chat", "terminal:c1", "1"], config)
    assert forgot.returncode == 0 and "forgot #1 Ana likes green tea" in forgot.stdout
    listed = run_mnemo(["memory", "forgotten", "--chat", "terminal:c1"], config)
    assert "#1 Ana likes green tea  (forgotten by the operator" in listed.stdout, listed.stderr
    lifted = run_mnemo(["memory", "forgotten", "--chat", "terminal:c1", "--lift", "1"], config)
    assert lifted.returncode == 0 and "lifted 1" in lifted.stdout
    empty = run_mnemo(["memory", "forgotten", "--chat", "terminal:c1"], config)
    assert empty.stdout == "" and "0 tombstones" in empty.stderr


def test_an_old_database_gains_senders_and_tombstones_keeping_its_memories(
    tmp_path: Path,
) -> None:
    conn = connect(tmp_path / "old.db", migrate=False)
    migrate(conn, upto=10)
    conn.execute("INSERT INTO chats (channel, external_chat_id) VALUES ('terminal', 'c1')")
    conn.execute(
        "INSERT INTO memories (chat_id, content, category) VALUES (1, 'likes tea', 'PROFILE')"
    )
    migrate(conn)
    [memory] = DatabaseMemoryStore(SqliteDatabase(conn)).list(1)
    assert (memory.content, memory.sender_id, memory.sender_name) == ("likes tea", "", "")
    DatabaseMemoryStore(SqliteDatabase(conn)).forget(memory.id, forgotten_by="test")
    assert [t.content for t in DatabaseMemoryStore(SqliteDatabase(conn)).tombstones(1)] == [
        "likes tea"
    ]
    conn.close()


def test_a_fact_forgotten_while_a_pass_ran_is_skipped_at_commit(engine: Engine) -> None:
    """The pass compares facts with tombstones before its commit; one made meanwhile is
    still caught by the commit itself."""
    store = engine.store()
    chat = engine.chat("c1")
    memory_id = store.add(chat, "Ana likes green tea", "PROFILE", source="t")
    store.forget(memory_id, forgotten_by="Ana (terminal:c1)")
    prepared = [
        PreparedFact("Ana likes green tea", "PROFILE"),
        PreparedFact("Ana owns a bike", "EVENT"),
    ]
    tally = FactWriter(store).write(chat, prepared)
    assert (tally.added, tally.skipped) == (1, 1)
    assert [m.content for m in store.list(chat)] == ["Ana owns a bike"]

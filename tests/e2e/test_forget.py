"""`/forgetme` deletes everything kept about a chat, and nothing of any other chat.

The check is by the schema, not by a list: every table with a `chat_id` column must hold
no row of the deleted chat, so a table added later that `forget_chat` does not handle (and
that does not cascade from `chats`) fails this test.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

from bots.runtime import Runtime
from core.api import Chat, Inbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, echo_responder
from core.chat.files import chat_dir
from core.context.summary import SUMMARY_MARKER
from core.storage.database import SqliteDatabase
from core.storage.db import Connection
from core.tasks.extension import TasksExtension
from core.tools.results import keep_tool_result
from core.turn.builtins import CoreExtension
from memory.extension import MemoryExtension
from memory.strategies.strategy_store import DatabaseStrategyStore
from reflector.extension import ReflectorExtension
from reflector.store import ChatRun

KNOWN_CHAT_TABLES = {
    "messages",
    "sessions",
    "compactions",
    "llm_usage",
    "memories",
    "strategies",
    "memory_reflector_state",
    "reflector_runs",
    "reflector_leases",
    "scheduled_tasks",
    "chat_timezones",
}
CODE = re.compile(r"/forgetme (\d{4})")
T = TypeVar("T")
SUMMARY = (
    "## Goal\nChat.\n## Constraints and preferences\nShort answers.\n## Progress\nTen turns."
    "\n## Key decisions\nNone.\n## Next steps\nGo on.\n## Critical context\nThe cat."
)


def inbound(text: str, chat_id: str, kind: str = "private") -> Inbound:
    return Inbound("terminal", chat_id, text, "u1", "Ann", chat_kind=kind)  # type: ignore[arg-type]


def extension(runtime: Runtime, kind: type[T]) -> T:
    [found] = [e for e in runtime.agent.extensions if isinstance(e, kind)]
    return found


def summaries_and_echo(request: dict[str, Any]) -> FakeReply:
    if request["messages"][0]["content"].startswith(SUMMARY_MARKER):
        return FakeReply(SUMMARY)
    return echo_responder(request)


def chat_id_tables(conn: Connection) -> set[str]:
    """Every table with a `chat_id` column, read from the schema itself."""
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    return {
        table
        for table in tables
        if any(column[1] == "chat_id" for column in conn.execute(f'PRAGMA table_info("{table}")'))
    }


def rows_of(conn: Connection, chat_id: int) -> dict[str, int]:
    return {
        table: conn.execute(
            f'SELECT count(*) FROM "{table}" WHERE chat_id = ?', (chat_id,)
        ).fetchone()[0]
        for table in sorted(chat_id_tables(conn))
    }


def test_the_schema_check_sees_any_table_with_a_chat_id(conn: Connection) -> None:
    conn.execute("CREATE TABLE added_later (id INTEGER PRIMARY KEY, chat_id INTEGER)")
    conn.execute("INSERT INTO added_later (chat_id) VALUES (7)")
    assert {"added_later", *KNOWN_CHAT_TABLES} <= chat_id_tables(conn)
    assert rows_of(conn, 7)["added_later"] == 1


async def fill(runtime: Runtime, key: str, fact: str) -> Chat:
    """A chat with something of every kind: messages, usage, a compaction (summary and
    archive), memories (indexed, embedded, one superseded), a strategy with events, its
    AGENTS.md, a stored tool result, the reflector's cursor, lease and runs, a scheduled
    task and the chat's time zone."""
    for n in range(10):
        await runtime.dispatcher(inbound(f"turn {n} in {key}: " + "w" * 200, key))
    compacted = await runtime.dispatcher(inbound("/compact", key))
    assert compacted is not None and compacted.text.startswith("Compacted")
    remembered = await runtime.dispatcher(inbound(f"remember: {fact}", key))
    assert remembered is not None and remembered.text.startswith("Noted")
    chat = runtime.store.find_chat("terminal", key)
    assert chat is not None
    keeper = extension(runtime, MemoryExtension).keeper
    old = keeper.store.add(chat.id, f"{key} used to live in Oslo", "PROFILE", source="tool")
    new = keeper.store.add(chat.id, f"{key} lives in Bergen now", "PROFILE", source="tool")
    keeper.store.supersede(old, new)
    assert keeper.rank(chat.id, fact, 5)  # the in-process keyword lists and vectors hold it
    strategies = DatabaseStrategyStore(runtime.storage.database)
    strategies.tag(strategies.add(chat.id, "style", f"Answer {key} briefly"), "helpful")
    keeper.files.write("chat", chat.channel, chat.external_chat_id, f"Notes about {key}.")
    keep_tool_result(
        runtime.config,
        runtime.agent.files,
        chat,
        "call_1",
        "big_tool",
        f"{key} result " + "r" * 20_000,
    )
    reflector = extension(runtime, ReflectorExtension).reflector
    reflector.runs.record(ChatRun(chat.id, ok=True, status="done", messages_seen=3))
    reflector.cursor.reset(chat.id, 5)
    assert reflector.leases.claim(chat.id) is not None
    tasks = extension(runtime, TasksExtension)
    tasks.tasks.set_timezone(chat.id, "Europe/Berlin")
    turn = TurnContext(chat, inbound("remind me", key))
    tasks.schedule(turn, "every day at 9", f"water {key}'s plants", "remind")
    return chat


async def test_forgetme_deletes_everything_of_the_chat_and_nothing_of_another(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = summaries_and_echo
    conn = runtime.conn
    keeper = extension(runtime, MemoryExtension).keeper
    keeper.store.add(None, "The operator of this bot is called Zed", "KNOWLEDGE", source="cli")
    keeper.files.write("global", "", "", "Global notes stay.")
    bea = await fill(runtime, "bea", "my cat is called Felix")
    ann = await fill(runtime, "ann", "my cat is called Miso")  # the newest: its id is reused
    assert chat_id_tables(conn) >= KNOWN_CHAT_TABLES  # the schema check sees the tables
    ann_rows, bea_rows = rows_of(conn, ann.id), rows_of(conn, bea.id)
    assert all(ann_rows[table] > 0 for table in KNOWN_CHAT_TABLES)  # something to delete
    ann_memories = [
        m.id for m in keeper.store.list(ann.id, include_global=False, include_archived=True)
    ]
    ann_strategies = [
        s.id
        for s in DatabaseStrategyStore(SqliteDatabase(conn)).for_chat(ann.id, include_global=False)
    ]
    usage_before = conn.execute("SELECT count(*) FROM llm_usage").fetchone()[0]

    asked = await runtime.dispatcher(inbound("/forgetme", "ann"))
    assert (
        asked is not None
        and "messages: 22" in asked.text
        and "session summary: 1" in asked.text
        and "memories: 3" in asked.text
    )
    asking = {"inbox": ann_rows["inbox"] + 1, "outbox": ann_rows["outbox"] + 1}
    assert rows_of(conn, ann.id) == ann_rows | asking  # asking deletes nothing
    code = CODE.search(asked.text)
    assert code is not None
    done = await runtime.dispatcher(inbound(f"/forgetme {code.group(1)}", "ann"))
    assert done is not None and done.text.startswith("Deleted everything")

    assert rows_of(conn, ann.id) == dict.fromkeys(sorted(chat_id_tables(conn)), 0)
    assert rows_of(conn, bea.id) == bea_rows
    assert conn.execute("SELECT count(*) FROM chats WHERE id = ?", (ann.id,)).fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM llm_usage").fetchone()[0] == usage_before
    marks = ", ".join("?" * len(ann_memories))
    for table, column in [
        ("memories_fts", "rowid"),
        ("memories_vec", "memory_id"),
        ("memories_vec_float", "memory_id"),
        ("memory_supersede_edges", "old_id"),
        ("memory_supersede_edges", "new_id"),
    ]:
        query = f"SELECT count(*) FROM {table} WHERE {column} IN ({marks})"
        assert conn.execute(query, ann_memories).fetchone()[0] == 0, table
    scope_rows = "SELECT count(*) FROM memory_changes WHERE scope = ?"
    assert conn.execute(scope_rows, (ann.id,)).fetchone()[0] == 0
    events = "SELECT count(*) FROM strategy_events WHERE strategy_id = ?"
    assert ann_strategies and all(
        conn.execute(events, (i,)).fetchone()[0] == 0 for i in ann_strategies
    )
    assert not chat_dir(runtime.config, ann).exists()
    kept = chat_dir(runtime.config, bea)
    assert (kept / "AGENTS.md").is_file()
    assert any((kept / "archive").iterdir()) and any((kept / "tool-results").iterdir())
    assert keeper.files.read("global", "", "") == "Global notes stay."
    assert [m.content for m in keeper.store.list(None)] == [
        "The operator of this bot is called Zed"
    ]

    # The chat starts afresh (its row id reused): no cache or index brings back "Miso".
    await runtime.dispatcher(inbound("what is my cat called?", "ann"))
    again = runtime.store.find_chat("terminal", "ann")
    assert again is not None and again.id == ann.id
    assert "Miso" not in str(fake_llm.requests[-1]["messages"])
    memory = await runtime.dispatcher(inbound("/memory", "ann"))
    assert memory is not None and "Miso" not in memory.text and "Zed" in memory.text
    await runtime.dispatcher(inbound("what is my cat called?", "bea"))
    assert "Felix" in str(fake_llm.requests[-1]["messages"])


async def test_forgetme_asks_first_and_its_code_expires(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    forget_me = extension(runtime, CoreExtension).forget_me
    now = 1_000_000.0
    forget_me.clock = lambda: now
    await runtime.dispatcher(inbound("hello", "cy"))
    asked = await runtime.dispatcher(inbound("/forgetme", "cy"))
    assert asked is not None and "messages: 2" in asked.text and "within 5 minutes" in asked.text
    code = CODE.search(asked.text)
    assert code is not None
    wrong = "0000" if code.group(1) != "0000" else "1111"
    refused = await runtime.dispatcher(inbound(f"/forgetme {wrong}", "cy"))
    assert refused is not None and "nothing was deleted" in refused.text
    now += 600.0  # ten minutes later the code has expired
    late = await runtime.dispatcher(inbound(f"/forgetme {code.group(1)}", "cy"))
    assert late is not None and "expired" in late.text
    chat = runtime.store.find_chat("terminal", "cy")
    assert chat is not None and runtime.store.count_messages(chat.id) == 2
    now += 60.0
    fresh = CODE.search((await runtime.dispatcher(inbound("/forgetme", "cy"))).text)  # type: ignore[union-attr]
    assert fresh is not None
    now += 240.0  # four minutes on: still valid
    done = await runtime.dispatcher(inbound(f"/forgetme {fresh.group(1)}", "cy"))
    assert done is not None and "messages: 2" in done.text
    assert runtime.store.find_chat("terminal", "cy") is None


async def test_forgetme_in_a_group_needs_a_control_chat(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await runtime.dispatcher(inbound("hello all", "-100", kind="group"))
    refused = await runtime.dispatcher(inbound("/forgetme", "-100", kind="group"))
    assert refused is not None and "mnemo chat delete terminal:-100" in refused.text
    assert CODE.search(refused.text) is None
    runtime.config.agent.control_chats = ["terminal:-100"]
    asked = await runtime.dispatcher(inbound("/forgetme", "-100", kind="group"))
    code = CODE.search(asked.text) if asked is not None else None
    assert code is not None
    await runtime.dispatcher(inbound(f"/forgetme {code.group(1)}", "-100", kind="group"))
    assert runtime.store.find_chat("terminal", "-100") is None

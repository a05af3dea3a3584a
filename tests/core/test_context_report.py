"""/context, `mnemo inspect CHAT [--json]`, the m0004 migration and the [context] config docs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bots.runtime import Runtime
from core.api import ContextSection, Extension, Inbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from core.context.plan import pressure
from core.context.report import context_report
from core.model.calibration import estimator_for
from core.model.tokens import REQUEST_OVERHEAD_TOKENS
from core.storage.db import connect
from migrations import migrate
from tests.conftest import REPO, run_mnemo, write_config
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


class Sections(Extension):
    name = "sections"

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        return [
            ContextSection("rules", "AGENTS.md", "always answer in French", 90, protected=True),
            ContextSection("memories", "memory", "fact " * 6_000, 40),
        ]


def test_pressure_levels() -> None:
    assert [pressure(n, 100) for n in (0, 49, 50, 74, 75, 89, 90, 120)] == [
        "low",
        "low",
        "medium",
        "medium",
        "high",
        "high",
        "critical",
        "critical",
    ]


async def test_context_command_shows_sections_sizes_and_pressure(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    runtime.extensions.add(Sections())
    await runtime.agent.handle(Inbound("terminal", "ctx", "hello there"))
    reply = await runtime.agent.handle(Inbound("terminal", "ctx", "/context"))
    assert reply is not None
    text = reply.text
    assert "static prefix:" in text and "history: 2 messages" in text
    assert "- rules (AGENTS.md, priority 90): 23/23 chars, protected" in text
    assert "- memories (memory, priority 40): " in text and "truncated" in text
    assert "pressure low" in text
    assert "compactions: 0, tokens saved: 0" in text
    assert "calibration:" in text and "after 1 samples" in text


async def test_context_accounts_for_every_token_tool_schemas_included(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    runtime.extensions.add(Sections())
    await runtime.agent.handle(Inbound("terminal", "sum", "hello there"))
    chat = runtime.store.find_chat("terminal", "sum")
    assert chat is not None
    turn = TurnContext(chat, Inbound("terminal", "sum", "and now?"))
    sections = await runtime.extensions.context_sections(turn)
    report = context_report(runtime.planner, chat, sections)
    assert sum(report.parts().values()) == report.total_tokens
    schemas = runtime.extensions.tools.schemas()
    assert report.tool_count == len(schemas) >= 2
    estimator = estimator_for(runtime.store, runtime.config)
    assert (
        report.tools_tokens
        == estimator.tools(schemas)
        > estimator.chars(len(json.dumps(schemas, ensure_ascii=False)))
    )  # the schemas and the function-calling preamble the model's tool cost adds
    assert report.tools_tokens > report.total_tokens // 20  # not a rounding error
    # What is left is the answer's header and per-message rounding, nothing hidden.
    assert REQUEST_OVERHEAD_TOKENS <= report.framing_tokens <= REQUEST_OVERHEAD_TOKENS + 8
    text = (await runtime.agent.handle(Inbound("terminal", "sum", "/context"))).text
    assert f"tool schemas: {len(schemas)} tools, ~" in text and "framing: ~" in text


async def test_context_shows_compactions_and_saved_tokens(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    runtime.config.llm.context_window = 4_096
    for n in range(8):
        await runtime.agent.handle(Inbound("terminal", "cmp", f"message {n} " + "q" * 300))
    await runtime.agent.handle(Inbound("terminal", "cmp", "/compact"))
    reply = await runtime.agent.handle(Inbound("terminal", "cmp", "/context"))
    assert reply is not None
    saved = runtime.conn.execute("SELECT tokens_before - tokens_after FROM compactions").fetchone()[
        0
    ]
    assert saved > 0
    assert f"compactions: 1, tokens saved: {saved}" in reply.text
    assert "history: 6 messages" in reply.text


def test_inspect_cli_json_and_unknown_chat(tmp_path: Path, fake_llm: FakeOpenAIServer) -> None:
    no_embedder = "[memory]\ntoken_budget = 0\n"  # keeps the subprocess from loading the model
    config_path = write_config(
        tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data", no_embedder
    )
    conn = connect(tmp_path / "data" / "mnemo.db")
    try:
        from core.storage.database import SqliteDatabase
        from core.storage.session_store import DatabaseSessionStore
        from core.storage.store import NewMessage

        store = DatabaseSessionStore(SqliteDatabase(conn))
        chat = store.get_or_create_chat("telegram", "-100123:42", "group", "group")
        store.append(
            chat.id, [NewMessage("user", "hi", sender="ana"), NewMessage("assistant", "hello")]
        )
    finally:
        conn.close()
    result = run_mnemo(["inspect", "telegram:-100123:42", "--json"], config_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["chat"] == "telegram:-100123:42"
    assert report["history_messages"] == 2
    assert report["pressure"] == "low" and report["compactions"] == 0
    assert report["total_tokens"] < report["effective_window"]
    assert isinstance(report["sections"], list)
    missing = run_mnemo(["inspect", "telegram:nope"], config_path)
    assert missing.returncode != 0
    assert "no chat 'telegram:nope'" in missing.stderr and "telegram:-100123:42" in missing.stderr


def test_m0004_migrates_an_old_database_with_rows(tmp_path: Path) -> None:
    conn = connect(tmp_path / "old.db", migrate=False)
    try:
        migrate(conn, upto=3)
        conn.execute("INSERT INTO chats (channel, external_chat_id) VALUES ('t', '1')")
        conn.execute("INSERT INTO messages (chat_id, role, content) VALUES (1, 'user', 'kept')")
        assert "m0004_context" in migrate(conn)
        row = conn.execute("SELECT content, compaction_id FROM messages").fetchone()
        assert row == ("kept", None)
        conn.execute("INSERT INTO context_calibration (model, chars_per_token) VALUES ('m', 3.5)")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert {"compactions", "context_calibration"} <= tables
    finally:
        conn.close()


def test_every_context_default_is_documented_in_config_example() -> None:
    text = (REPO / "config.example.toml").read_text(encoding="utf-8")
    section = text.split("[context]", 1)[1].split("\n[", 1)[0]
    for key in Config().context.model_dump():
        assert f"{key} =" in section, key

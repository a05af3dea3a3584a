"""`mnemo storage migrate --to postgresql://…` as the real CLI: a SQLite deployment with chats,
memories, strategies, a compaction archive and AGENTS.md notes moves to PostgreSQL; every
count is verified, the bot then runs on PostgreSQL with the same history and memory, and a
second run refuses to copy into a database that is no longer empty."""

from __future__ import annotations

import json
from pathlib import Path

from bots.runtime import build_runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer
from tests.conftest import make_config, run_mnemo, write_config
from tests.e2e.test_chat_data_cli import prepare


async def test_a_sqlite_deployment_moves_to_postgresql(
    tmp_path: Path, fake_llm: FakeOpenAIServer, fresh_postgres_url: str
) -> None:
    config_path = await prepare(tmp_path, fake_llm)

    moved = run_mnemo(["storage", "migrate", "--to", fresh_postgres_url, "--json"], config_path)
    assert moved.returncode == 0, moved.stderr
    report = json.loads(moved.stdout)
    assert report["ok"] is True and report["files"] == 1  # Ann's AGENTS.md
    counts = {t["table"]: (t["source_rows"], t["target_rows"]) for t in report["tables"]}
    assert counts["chats"] == (2, 2) and counts["memories"] == (2, 2)
    assert counts["messages"][0] == counts["messages"][1] >= 8
    assert "messages:" in moved.stderr  # progress, table by table

    config = make_config(tmp_path / "data-unused", fake_llm.base_url)
    config.storage.url = fresh_postgres_url
    runtime = build_runtime(config)
    try:
        await runtime.start()
        chat = runtime.store.find_chat("terminal", "ann")
        assert chat is not None
        copied = runtime.store.history(chat.id)
        assert "remember: my cat is called Miso" in [m.content for m in copied]
        await runtime.dispatcher(Inbound("terminal", "ann", "what is my cat called?", "u", "Ann"))
        request = json.dumps(fake_llm.requests[-1])
        assert "Miso" in request  # the copied memory is recalled on PostgreSQL
        assert "prefers tea" in request  # and the AGENTS.md notes came along
        newer = runtime.store.history(chat.id)[len(copied) :]
        assert newer and min(m.id for m in newer) > max(m.id for m in copied)  # ids continue
    finally:
        runtime.close()

    again = run_mnemo(["storage", "migrate", "--to", fresh_postgres_url], config_path)
    assert again.returncode != 0 and "not empty" in again.stderr


async def test_migrate_says_what_is_wrong_with_the_target(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config_path = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    wrong = run_mnemo(["storage", "migrate", "--to", "mysql://x"], config_path)
    assert wrong.returncode != 0 and "postgresql:// URL" in wrong.stderr
    down = run_mnemo(
        ["storage", "migrate", "--to", "postgresql://u:pw@127.0.0.1:9/x?connect_timeout=1"],
        config_path,
    )
    assert (
        down.returncode != 0 and "cannot connect to postgresql://u:***@127.0.0.1:9/x" in down.stderr
    )

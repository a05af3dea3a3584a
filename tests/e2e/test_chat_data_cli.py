"""`mnemo chat export` and `mnemo chat delete`, run as the real CLI in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

from bots.runtime import build_runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer
from memory.stores import file_memory, strategy_store
from tests.conftest import make_config, run_mnemo, write_config


async def prepare(tmp_path: Path, fake_llm: FakeOpenAIServer, url: str = "") -> Path:
    """A database with two chats, written by a bot that has since stopped; the config.
    `url`: the store (default: SQLite under the data dir)."""
    data = tmp_path / "data"
    config = make_config(data, fake_llm.base_url)
    config.storage.url = url
    runtime = build_runtime(config)
    try:
        for key, name, fact in [
            ("ann", "Ann", "my cat is called Miso"),
            ("bo", "Bo", "I go skiing every winter"),
        ]:
            for text in [f"hello, I am {name}", f"remember: {fact}"]:
                await runtime.dispatcher(Inbound("terminal", key, text, "u", name))
        chat = runtime.store.find_chat("terminal", "ann")
        assert chat is not None
        strategy_store(runtime.storage).add(chat.id, "style", "Ann likes short answers")
        notes = "Ann's notes: prefers tea."
        file_memory(runtime.storage, data).write("chat", chat.channel, chat.external_chat_id, notes)
    finally:
        runtime.close()
    extra = f'url = "{url}"\n' if url else ""
    return write_config(tmp_path / "config.toml", fake_llm.base_url, data, extra)


async def test_export_holds_messages_memories_strategies_and_notes(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str
) -> None:
    config = await prepare(tmp_path, fake_llm, storage_url)
    result = run_mnemo(["chat", "export", "terminal:ann"], config)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["chat"]["key"] == "terminal:ann"
    said = [(m["role"], m["sender"], m["content"]) for m in document["messages"]]
    assert said[0] == ("user", "Ann", "hello, I am Ann")
    assert ("user", "Ann", "remember: my cat is called Miso") in said
    assert all(m["created_at"] for m in document["messages"])
    assert not any("Bo" in content for _, _, content in said)  # only this chat
    [memory] = document["memories"]
    assert "Miso" in memory["content"] and memory["source"] == "explicit"
    assert memory["created_at"] and memory["confidence"] > 0
    assert [s["content"] for s in document["strategies"]] == ["Ann likes short answers"]
    assert document["notes"][0]["content"] == "Ann's notes: prefers tea."

    output = tmp_path / "ann.md"
    written = run_mnemo(
        ["chat", "export", "terminal:ann", "--format", "markdown", "--output", str(output)], config
    )
    assert written.returncode == 0, written.stderr
    markdown = output.read_text(encoding="utf-8")
    assert markdown.startswith("# Chat terminal:ann")
    assert "· user · Ann ·" in markdown and "hello, I am Ann" in markdown
    assert "my cat is called Miso" in markdown and "source explicit" in markdown
    assert "Ann likes short answers" in markdown and "prefers tea" in markdown

    unknown = run_mnemo(["chat", "export", "terminal:nobody"], config)
    assert unknown.returncode != 0 and "no chat 'terminal:nobody'" in unknown.stderr


async def test_delete_asks_then_deletes_only_that_chat(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str
) -> None:
    config = await prepare(tmp_path, fake_llm, storage_url)
    declined = run_mnemo(["chat", "delete", "terminal:ann"], config, stdin="n\n")
    assert declined.returncode != 0
    assert "messages: 4" in declined.stdout and "memories: 1" in declined.stdout
    assert json.loads(run_mnemo(["chat", "export", "terminal:ann"], config).stdout)["messages"]

    deleted = run_mnemo(["chat", "delete", "terminal:ann", "--yes"], config)
    assert deleted.returncode == 0, deleted.stderr
    assert (
        "Deleted chat terminal:ann" in deleted.stdout and "learned strategies: 1" in deleted.stdout
    )
    gone = run_mnemo(["chat", "export", "terminal:ann"], config)
    assert gone.returncode != 0 and "known: terminal:bo" in gone.stderr
    kept = json.loads(run_mnemo(["chat", "export", "terminal:bo"], config).stdout)
    assert len(kept["messages"]) == 4 and "ski" in kept["memories"][0]["content"]
    assert not (tmp_path / "data" / "terminal" / "ann").exists()


async def test_export_keeps_an_existing_file_unless_forced(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = await prepare(tmp_path, fake_llm)
    output = tmp_path / "ann.json"
    output.write_text("my own notes", encoding="utf-8")
    args = ["chat", "export", "terminal:ann", "--output", str(output)]
    refused = run_mnemo(args, config)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"{output} exists" in refused.stderr and "--force" in refused.stderr
    assert output.read_text(encoding="utf-8") == "my own notes"
    forced = run_mnemo([*args, "--force"], config)
    assert forced.returncode == 0, forced.stderr
    assert json.loads(output.read_text(encoding="utf-8"))["chat"]["key"] == "terminal:ann"

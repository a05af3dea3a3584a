"""End to end through the real `mnemo chat` process and the fake OpenAI server, on both
engines (`[storage] url` SQLite or PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import StorageConfig
from core.storage.engine import open_storage
from core.storage.stores import session_store
from tests.conftest import run_mnemo, write_config


@pytest.fixture
def url(storage_url: str) -> str:
    """`storage_url`: each test runs on SQLite and on PostgreSQL."""
    return storage_url


def configured(tmp_path: Path, base_url: str, url: str) -> Path:
    return write_config(tmp_path / "config.toml", base_url, tmp_path / "data", f'url = "{url}"')


def messages_in(url: str) -> list[tuple[str, str]]:
    """Every chat's messages, in the order they were stored."""
    storage = open_storage(StorageConfig(url=url))
    try:
        store = session_store(storage)
        found = [m for chat in store.list_chats() for m in store.messages_between(chat.id, 0, 999)]
    finally:
        storage.close()
    return [(m.role, m.content) for m in sorted(found, key=lambda m: m.id)]


def test_piped_conversation_with_a_tool_call_and_a_restart(
    tmp_path: Path, fake_llm: FakeOpenAIServer, url: str
) -> None:
    config = configured(tmp_path, fake_llm.base_url, url)
    fake_llm.add(
        FakeReply("Nice to meet you, Bob."),
        FakeReply(tool_calls=[tool_call("get_current_time", {}, "call_t")]),
        FakeReply("It is late."),
    )
    result = run_mnemo(["chat"], config, stdin="hello, I'm Bob\nwhat time is it?\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Nice to meet you, Bob.", "It is late."]
    assert "Traceback" not in result.stderr

    fake_llm.add(FakeReply("You are Bob."))
    again = run_mnemo(["chat"], config, stdin="who am I?\n")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "You are Bob."
    last_request = fake_llm.requests[-1]["messages"]
    contents = [m.get("content") for m in last_request]
    assert "hello, I'm Bob" in contents and "It is late." in contents
    assert messages_in(url)[-2:] == [("user", "who am I?"), ("assistant", "You are Bob.")]


def test_llm_failure_then_a_good_turn(tmp_path: Path, fake_llm: FakeOpenAIServer, url: str) -> None:
    config = configured(tmp_path, fake_llm.base_url, url)
    fake_llm.add(FakeReply(status=503, error="overloaded"), FakeReply("All good now."))
    result = run_mnemo(["chat"], config, stdin="first\nsecond\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Sorry") and lines[1] == "All good now."
    assert messages_in(url) == [
        ("user", "first"),
        ("user", "second"),
        ("assistant", "All good now."),
    ]


def test_unreachable_model_server_says_what_to_set(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.toml", "http://127.0.0.1:9/v1", tmp_path / "data")
    run = run_mnemo(["run"], config)
    assert run.returncode != 0
    assert "OPENAI_BASE_URL" in run.stderr and "Traceback" not in run.stderr
    doctor = run_mnemo(["doctor"], config)
    assert doctor.returncode == 1
    assert "[FAIL] llm" in doctor.stdout and "[ok  ] database" in doctor.stdout


def test_invalid_config_stops_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[llm]\ntimeout_s = -1\n", encoding="utf-8")
    result = run_mnemo(["chat"], config)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "[llm] timeout_s" in result.stderr and "Traceback" not in result.stderr


def test_doctor_passes_with_a_model_server(
    tmp_path: Path, fake_llm: FakeOpenAIServer, url: str
) -> None:
    config = configured(tmp_path, fake_llm.base_url, url)
    result = run_mnemo(["doctor"], config)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ok  ] llm" in result.stdout
    if url.startswith("postgresql"):
        assert "(PostgreSQL 18" in result.stdout and "[ok  ] pgvector: installed" in result.stdout
    else:
        assert "(SQLite " in result.stdout and "sqlite-vec: loaded" in result.stdout

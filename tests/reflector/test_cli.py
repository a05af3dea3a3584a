"""The reflector from the real `mnemo` CLI: one pass, two processes at once, the scheduler."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import StorageConfig
from core.storage.engine import Storage, open_storage
from core.storage.store import NewMessage
from core.storage.stores import session_store
from tests.conftest import run_mnemo, start_mnemo, write_config
from tests.reflector.engines import query

# Subprocesses skip the 5-second model load: dedup falls back to keywords there.
NO_MODEL = '[memory]\nembedding_model = "/nonexistent/model"\n'


def facts_reply(*contents: str, delay_s: float = 0.0) -> Callable[[dict[str, object]], FakeReply]:
    body = json.dumps({"memories": [{"content": c, "category": "PROFILE"} for c in contents]})
    return lambda request: FakeReply(content=body, delay_s=delay_s)


def setup(
    tmp_path: Path, fake: FakeOpenAIServer, storage_url: str, extra: str = ""
) -> tuple[Path, Storage]:
    """A config on `storage_url` (either engine) and a chat with one message; the Storage
    is the test's own view of the database, for the assertions."""
    data = tmp_path / "data"
    where = f'url = "{storage_url}"\n'  # [storage], which write_config opens last
    config = write_config(tmp_path / "config.toml", fake.base_url, data, where + NO_MODEL + extra)
    storage = open_storage(StorageConfig(url=storage_url))
    store = session_store(storage)
    chat = store.get_or_create_chat("terminal", "alice")
    store.append(chat.id, [NewMessage("user", "I volunteer at the animal shelter", "alice")])
    return config, storage


@pytest.fixture
def opened() -> Iterator[list[Storage]]:
    """Storages the test opened, closed at the end."""
    storages: list[Storage] = []
    yield storages
    for storage in storages:
        storage.close()


def count(db: Storage, sql: str) -> int:
    [(found,)] = query(db, sql)
    return int(found)


def test_reflect_once_prints_what_it_did(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str, opened: list[Storage]
) -> None:
    config, db = setup(tmp_path, fake_llm, storage_url)
    opened.append(db)
    fake_llm.responder = facts_reply("Alice volunteers at the animal shelter.")
    first = run_mnemo(["reflect", "--once", "--chat", "terminal:alice"], config)
    assert first.returncode == 0, first.stderr
    assert "1 messages" in first.stdout and "1 added" in first.stdout
    assert "maintenance:" in first.stdout
    again = run_mnemo(["reflect", "--once"], config)
    assert again.returncode == 0 and "no chat has new messages" in again.stdout
    assert count(db, "SELECT count(*) FROM memories") == 1


def test_reflect_rejects_bad_usage(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str, opened: list[Storage]
) -> None:
    config, db = setup(tmp_path, fake_llm, storage_url)
    opened.append(db)
    missing = run_mnemo(["reflect", "--once", "--chat", "terminal:nobody"], config)
    assert missing.returncode == 2 and "no chat 'terminal:nobody'" in missing.stderr
    no_once = run_mnemo(["reflect"], config)
    assert no_once.returncode == 2 and "--once" in no_once.stderr


def test_a_failed_pass_exits_nonzero_and_keeps_the_cursor(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str, opened: list[Storage]
) -> None:
    config, db = setup(tmp_path, fake_llm, storage_url)
    opened.append(db)
    fake_llm.add(FakeReply(status=503, error="overloaded"))
    failed = run_mnemo(["reflect", "--once"], config)
    assert failed.returncode == 1 and "FAILED" in failed.stdout and "overloaded" in failed.stdout
    assert count(db, "SELECT count(*) FROM memory_reflector_state WHERE last_message_id > 0") == 0


def test_a_skipped_batch_is_a_visible_warning_in_the_pass_and_the_runs_listing(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str, opened: list[Storage]
) -> None:
    config, db = setup(
        tmp_path, fake_llm, storage_url, '[reflector]\nmax_attempts = 1\nstatements = "off"\n'
    )
    opened.append(db)
    fake_llm.responder = lambda request: FakeReply(content="no JSON from this model")
    skipped = run_mnemo(["reflect", "--once"], config)
    assert skipped.returncode == 1
    assert "WARNING: chat 1: 1 messages" in skipped.stdout and "SKIPPED" in skipped.stdout
    assert "skipped after 1 failed attempts" in skipped.stdout
    assert count(db, "SELECT count(*) FROM memory_reflector_state WHERE last_message_id > 0") == 1
    listing = run_mnemo(["reflect", "--runs", "--chat", "terminal:alice"], config)
    assert listing.returncode == 0, listing.stderr
    [line] = listing.stdout.splitlines()
    assert line.startswith("WARNING: #1 ") and "SKIPPED: no JSON object" in line


def test_the_pass_and_the_runs_listing_say_why_facts_were_skipped(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str, opened: list[Storage]
) -> None:
    config, db = setup(tmp_path, fake_llm, storage_url)
    opened.append(db)
    fake_llm.responder = facts_reply(
        "Alice volunteers at the animal shelter.", "Elenrocha sings opera in Madrid."
    )
    done = run_mnemo(["reflect", "--once"], config)
    assert done.returncode == 0, done.stderr
    assert "1 added" in done.stdout and "1 skipped (1 ungrounded)" in done.stdout
    listing = run_mnemo(["reflect", "--runs"], config)
    assert listing.returncode == 0, listing.stderr
    [line] = listing.stdout.splitlines()
    assert line.startswith("#1 ") and "1 skipped (1 ungrounded)" in line


def test_two_processes_never_reflect_on_the_same_chat(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str, opened: list[Storage]
) -> None:
    config, db = setup(tmp_path, fake_llm, storage_url)
    opened.append(db)
    fake_llm.responder = facts_reply("Alice volunteers at the animal shelter.", delay_s=1.5)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: run_mnemo(["reflect", "--once"], config), range(2)))
    outputs = "\n".join(result.stdout for result in results)
    assert all(result.returncode == 0 for result in results), outputs
    assert count(db, "SELECT count(*) FROM memories") == 1
    # Either the second process found the chat leased, or it started after the first had
    # committed and found nothing new; never two model calls for the same messages.
    assert len(fake_llm.requests) == 1
    assert "1 added" in outputs


@pytest.mark.parametrize("command", [["run"], ["reflector"]])
def test_the_scheduler_really_fires(
    tmp_path: Path,
    fake_llm: FakeOpenAIServer,
    command: list[str],
    storage_url: str,
    opened: list[Storage],
) -> None:
    extra = "[reflector]\ninterval_mins = 0.01\n[terminal]\nenabled = false\n"
    config, db = setup(tmp_path, fake_llm, storage_url, extra)
    opened.append(db)
    fake_llm.responder = facts_reply("Alice volunteers at the animal shelter.")
    process = start_mnemo(command, config, tmp_path)
    try:
        deadline = time.monotonic() + 90
        while count(db, "SELECT count(*) FROM reflector_runs WHERE ok = 1") == 0:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "the reflector never ran"
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert count(db, "SELECT count(*) FROM memories WHERE source = 'reflector'") == 1

"""The core's part of a chat's data on both engines: messages, summary, compaction archives and
stored tool results (the chat's files: under the data dir, or `stored_files` rows)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.chat.data import (
    ARCHIVES,
    MEDIA,
    MESSAGES,
    SUMMARY,
    TOOL_RESULTS,
    CoreChatData,
    forget_chat,
)
from core.chat.files import chat_prefix
from core.config import Config
from core.storage.store import NewMessage
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config, storage_url: str) -> Iterator[Runtime]:
    config.storage.url = storage_url
    rt = light_runtime(config)
    yield rt
    rt.close()


def test_a_chats_files_are_counted_exported_and_forgotten_with_it(runtime: Runtime) -> None:
    store, files = runtime.store, runtime.agent.files
    ann = store.get_or_create_chat("telegram", "-100:7", "Ann's group", "group")
    bea = store.get_or_create_chat("telegram", "8")
    for chat in (ann, bea):
        store.append(chat.id, [NewMessage("user", "hi"), NewMessage("assistant", "hello")])
        files.write_text(f"{chat_prefix(chat)}/tool-results/1-big.txt", f"{chat.id} result")
        files.write_text(f"{chat_prefix(chat)}/archive/1-messages.md", "# archived")
        files.write_text(f"{chat_prefix(chat)}/AGENTS.md", "notes")  # the memory package's
        files.write_bytes(f"{chat_prefix(chat)}/media/abc.jpg", b"\xff\xd8 a photo")
    data = CoreChatData(runtime.config, store, files)
    counted = {MESSAGES: 2, SUMMARY: 0, ARCHIVES: 1, TOOL_RESULTS: 1, MEDIA: 1}
    assert data.counts(ann) == counted
    sections = {section.key: section for section in data.export(ann)}
    assert sections["tool_results"].records == [
        {"path": "tool-results/1-big.txt", "content": f"{ann.id} result"}
    ]
    assert sections["media"].records == [{"path": "media/abc.jpg"}]
    gone = forget_chat(store, runtime.extensions, ann)
    assert gone == {MESSAGES: 2, ARCHIVES: 1, TOOL_RESULTS: 1, MEDIA: 1}
    assert files.list(chat_prefix(ann)) == []  # everything under its directory
    assert store.find_chat("telegram", "-100:7") is None
    assert len(files.list(chat_prefix(bea))) == 4 and store.count_messages(bea.id) == 2

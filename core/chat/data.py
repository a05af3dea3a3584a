"""A chat's data as a whole: what is kept (listed before deleting), the export of all of it
(`mnemo chat export`, JSON or Markdown) and its deletion (`/forgetme`, `mnemo chat delete`).

Every extension answers for its own part through the `chat_data`, `export_chat` and
`forget_chat` hooks. The core's part is `CoreChatData`: the messages, the session summary,
compaction archives, stored tool results, and the chat row itself, which goes last.
Model usage rows (token counts and timings, no text) are kept without the chat.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from core.api import Chat, ChatDataSection
from core.chat.files import ARCHIVE_DIR, TOOL_RESULTS_DIR, chat_prefix
from core.chat.media import MEDIA_DIR, NO_VISION_MARK
from core.clock import now_iso
from core.config import Config
from core.storage.file_store import FileStore
from core.storage.store import SessionStore, StoredMessage
from core.turn.extensions import Extensions

logger = logging.getLogger(__name__)

MESSAGES = "messages"
SUMMARY = "session summary"
ARCHIVES = "compaction archives"
TOOL_RESULTS = "stored tool results"
MEDIA = "images and voice notes"
EXPORT_FORMAT = "mnemo-chat-export/1"
PAGE = 1000
KEPT = (
    "Kept: the token counts and timings of past model calls (numbers, no text), no longer"
    " linked to this chat; global memories and notes, which belong to no chat."
)


def chat_inventory(extensions: Extensions, chat: Chat) -> dict[str, int]:
    """What is kept about `chat`, by kind (kinds with nothing left out)."""
    return extensions.chat_data(chat)


def forget_chat(store: SessionStore, extensions: Extensions, chat: Chat) -> dict[str, int]:
    """Delete everything kept about `chat`, every extension's rows in one transaction (the
    chat row last), then scrub the engine's copies of them (`SessionStore.scrub_deleted`);
    return {kind: how many went}, kinds with nothing left out."""
    with store.transaction():
        gone = extensions.forget_chat(chat)
    store.scrub_deleted()
    logger.info("deleted the data of chat %s: %s", chat.key, gone)
    return {kind: count for kind, count in gone.items() if count}


def describe(counts: dict[str, int]) -> str:
    """`counts` as lines for people: `- messages: 42`."""
    return "\n".join(f"- {kind}: {count}" for kind, count in counts.items()) or "- nothing"


@dataclass(frozen=True)
class ChatExport:
    """Everything kept about one chat, as every extension gave it."""

    chat: Chat
    exported_at: str
    sections: list[ChatDataSection]

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "format": EXPORT_FORMAT,
            "exported_at": self.exported_at,
            "chat": chat_record(self.chat),
        }
        for section in self.sections:
            document[section.key] = section.records
        return document

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2) + "\n"

    def to_markdown(self) -> str:
        chat = self.chat
        title = f" ({chat.title})" if chat.title else ""
        lines = [
            f"# Chat {chat.key}{title}",
            "",
            f"A {chat.kind} chat, exported {self.exported_at}.",
        ]
        for section in self.sections:
            lines += ["", f"## {section.title}", "", section.markdown.rstrip()]
        return "\n".join(lines) + "\n"


def export_chat(extensions: Extensions, chat: Chat) -> ChatExport:
    return ChatExport(chat, now_iso(), extensions.export_chat(chat))


def chat_record(chat: Chat) -> dict[str, Any]:
    return {
        "id": chat.id,
        "key": chat.key,
        "channel": chat.channel,
        "chat_id": chat.external_chat_id,
        "title": chat.title,
        "kind": chat.kind,
    }


def all_messages(store: SessionStore, chat_id: int) -> Iterator[StoredMessage]:
    """Every message of the chat, compacted ones and earlier sessions too, oldest first."""
    after = 0
    while page := store.messages_between(chat_id, after, PAGE):
        yield from page
        after = page[-1].id


def message_record(message: StoredMessage) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": message.id,
        "role": message.role,
        "sender": message.sender,
        "created_at": message.created_at,
        "content": message.content,
    }
    if message.tool_calls:
        record["tool_calls"] = message.tool_calls
    if message.tool_call_id:
        record["tool_call_id"] = message.tool_call_id
    return record


def message_markdown(message: StoredMessage) -> str:
    who = f" · {message.sender}" if message.sender else ""
    lines = [f"### #{message.id} · {message.role}{who} · {message.created_at}", ""]
    if message.tool_call_id:
        lines.append(f"(result of tool call `{message.tool_call_id}`)")
    if message.content:
        lines.append(message.content)
    for call in message.tool_calls or []:
        function = call.get("function", {})
        lines.append(f"- tool call `{function.get('name')}`({function.get('arguments', '')})")
    return "\n".join(lines)


@dataclass(frozen=True)
class CoreChatData:
    """The core's part of a chat's data (the built-ins' extension hooks call this)."""

    config: Config
    store: SessionStore
    files: FileStore

    def counts(self, chat: Chat) -> dict[str, int]:
        prefix = chat_prefix(chat)
        return {
            MESSAGES: self.store.count_messages(chat.id),
            SUMMARY: int(bool(self.store.session(chat.id).summary)),
            ARCHIVES: len(self.files.list(f"{prefix}/{ARCHIVE_DIR}")),
            TOOL_RESULTS: len(self.files.list(f"{prefix}/{TOOL_RESULTS_DIR}")),
            MEDIA: len(self._media_files(chat)),
        }

    def _media_files(self, chat: Chat) -> list[str]:
        """The chat's images and voice notes (`core.chat.media`), by path."""
        prefix = chat_prefix(chat)
        return [
            path
            for path in self.files.list(f"{prefix}/{MEDIA_DIR}")
            if path != f"{prefix}/{NO_VISION_MARK}"
        ]

    def export(self, chat: Chat) -> list[ChatDataSection]:
        messages = list(all_messages(self.store, chat.id))
        transcript = "\n\n".join(message_markdown(message) for message in messages)
        sections = [
            ChatDataSection(
                "messages",
                "Messages",
                [message_record(message) for message in messages],
                transcript or "(none)",
            )
        ]
        summary = self.store.session(chat.id).summary
        if summary:
            sections.append(ChatDataSection("summary", "Summary", [{"text": summary}], summary))
        prefix = chat_prefix(chat)
        stored = [
            {"path": path.removeprefix(f"{prefix}/"), "content": self.files.read_text(path) or ""}
            for path in self.files.list(f"{prefix}/{TOOL_RESULTS_DIR}")
        ]
        if stored:
            text = "\n\n".join(
                f"### {item['path']}\n\n```\n{item['content']}\n```" for item in stored
            )
            sections.append(ChatDataSection("tool_results", "Stored tool results", stored, text))
        media = [{"path": path.removeprefix(f"{prefix}/")} for path in self._media_files(chat)]
        if media:
            listed = "\n".join(f"- {item['path']}" for item in media)
            sections.append(ChatDataSection("media", "Images and voice notes (files kept "
                                            "in the chat's directory)", media, listed))  # fmt: skip
        return sections

    def forget(self, chat: Chat) -> dict[str, int]:
        """The messages, session, compactions and the chat row, then the chat's files
        (archives, tool results, anything left under its directory)."""
        counts = self.counts(chat)
        counts[MESSAGES] = self.store.delete_chat(chat.id)
        self.files.delete_tree(chat_prefix(chat))
        return counts

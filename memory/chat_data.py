"""What the memory package keeps about one chat, for export and deletion: its structured
memories (archived ones too, with where each came from) and its own AGENTS.md notes.

Global memories and the global and channel notes belong to no chat: never exported with
one, never deleted with one.
"""

from __future__ import annotations

from dataclasses import asdict

from core.api import Chat, ChatDataSection
from memory.keeper import MemoryKeeper
from memory.recall import Recaller
from memory.store import Memory

MEMORIES = "memories"
NOTES = "notes (AGENTS.md)"
RECALL_INDEX = "messages in the recall index"


def chat_memories(keeper: MemoryKeeper, chat: Chat) -> list[Memory]:
    return keeper.store.list(chat.id, include_global=False, include_archived=True)


def memory_counts(keeper: MemoryKeeper, chat: Chat) -> dict[str, int]:
    notes = keeper.files.exists("chat", chat.channel, chat.external_chat_id)
    return {MEMORIES: len(chat_memories(keeper, chat)), NOTES: int(notes)}


def memory_line(memory: Memory) -> str:
    """One memory with its provenance, for people."""
    flags = " (archived)" if memory.archived else ""
    expiry = f", expires {memory.expires_at}" if memory.expires_at else ""
    return (
        f"- #{memory.id} {memory.line()}{flags} (source {memory.source or 'unknown'},"
        f" confidence {memory.confidence:.2f}, created {memory.created_at},"
        f" updated {memory.updated_at}, last seen {memory.last_seen_at}{expiry})"
    )


def export_memory(keeper: MemoryKeeper, chat: Chat) -> list[ChatDataSection]:
    memories = chat_memories(keeper, chat)
    records = [
        {key: value for key, value in asdict(memory).items() if key != "embedding_model"}
        for memory in memories
    ]
    sections = [
        ChatDataSection(
            MEMORIES,
            "Memories",
            records,
            "\n".join(memory_line(memory) for memory in memories) or "(none)",
        )
    ]
    where = keeper.files.scope("chat", chat.channel, chat.external_chat_id)
    notes = keeper.files.read("chat", chat.channel, chat.external_chat_id)
    if notes:
        record = {"path": where.label, "content": notes}
        sections.append(ChatDataSection("notes", "Notes (AGENTS.md)", [record], notes))
    return sections


def forget_memory(keeper: MemoryKeeper, chat: Chat) -> dict[str, int]:
    gone = keeper.store.forget_chat(chat.id)
    notes = keeper.files.delete("chat", chat.channel, chat.external_chat_id)
    return {MEMORIES: gone, NOTES: int(notes)}


def export_recall(recaller: Recaller, chat: Chat) -> ChatDataSection:
    """The recall index holds no text of its own (it reads `messages`, exported by the
    core): which messages it covers and which model made their vectors."""
    rows = recaller.store.rows(chat.id)
    records = [
        {"message_id": row.message_id, "embedded": row.embedding is not None} for row in rows
    ]
    markdown = f"{len(rows)} messages indexed for recall (their text is in the history)."
    return ChatDataSection("recall", "Recall index", records, markdown)

"""The memory tools the model can call: AGENTS.md read/write and structured-memory search/edit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from core.api import Tool, TurnContext
from core.errors import InputError, ToolError
from core.text import whole_number
from memory.backend import LocalBackend, MemoryBackend
from memory.daily_notes import DailyNotes, parse_day, today
from memory.files import SCOPES
from memory.keeper import MemoryKeeper
from memory.notes import TODAY, NoteWrite, write_notes
from memory.store import CATEGORIES, MAX_ID_DIGITS_READ, check_memory_id

MAX_SEARCH_K = 50
ESSENTIAL_TOOLS = (
    "read_memory",
    "write_memory",
    "structured_memory_search",
    "structured_memory_add",
)


def text_arg(args: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = args.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise ToolError(f"`{name}` must be a non-empty string")
    return value


def int_arg(args: dict[str, Any], name: str, default: int | None = None) -> int:
    value = args.get(name, default)
    if isinstance(value, str):
        value = whole_number(value.strip().removeprefix("#"), max_digits=MAX_ID_DIGITS_READ)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError(f"`{name}` must be an integer")
    return value


def memory_id_arg(args: dict[str, Any]) -> int:
    try:
        return check_memory_id(int_arg(args, "id"))
    except InputError as exc:
        raise ToolError(str(exc)) from exc


NOTE_SCOPES = (*SCOPES, TODAY)


def scope_arg(args: dict[str, Any]) -> str:
    scope = text_arg(args, "scope").strip().lower()
    if scope not in NOTE_SCOPES:
        raise ToolError(f"`scope` must be one of {', '.join(NOTE_SCOPES)}")
    return scope


class MemoryTools:
    def __init__(self, keeper: MemoryKeeper, backend: MemoryBackend | None = None) -> None:
        self.keeper = keeper
        self.backend = backend or LocalBackend(keeper)

    async def read_memory(self, turn: TurnContext, args: dict[str, Any]) -> str:
        scope = scope_arg(args)
        if scope == TODAY:
            return self.read_day(turn, text_arg(args, "date", required=False))
        text = self.keeper.files.read(scope, turn.chat.channel, turn.chat.external_chat_id)
        return text or f"(the {scope} AGENTS.md is empty)"

    def read_day(self, turn: TurnContext, day_text: str) -> str:
        """One daily note of the chat: today's, or the day `day_text` names (YYYY-MM-DD)."""
        try:
            day = parse_day(day_text) if day_text.strip() else today()
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        chat = turn.chat
        notes = DailyNotes(self.keeper.files, chat.channel, chat.external_chat_id)
        return notes.read(day) or f"(no daily note for {day.isoformat()})"

    async def write_memory(self, turn: TurnContext, args: dict[str, Any]) -> str:
        write = NoteWrite(
            scope_arg(args), text_arg(args, "content", required=False), bool(args.get("append"))
        )
        return write_notes(self.keeper, turn, write)

    async def search(self, turn: TurnContext, args: dict[str, Any]) -> str:
        query = text_arg(args, "query")
        k = min(max(int_arg(args, "k", 5), 1), MAX_SEARCH_K)
        ranked = await self.backend.rank(turn.chat, query, k)
        lines = [
            (f"#{item.memory.id} " if item.memory.id else "")  # 0: the memory server's own row
            + item.memory.line()
            + (" (global)" if item.memory.chat_id is None else "")
            for item in ranked
        ]
        chat = turn.chat
        days = DailyNotes(self.keeper.files, chat.channel, chat.external_chat_id)
        lines += [f"daily note {hit}" for hit in days.search(query, today())]
        return "\n".join(lines) or "no matching memories"

    async def add(self, turn: TurnContext, args: dict[str, Any]) -> str:
        content = self.keeper.checked_not_forgotten(turn.chat.id, text_arg(args, "content"))
        category = text_arg(args, "category", required=False) or "KNOWLEDGE"
        access = self.keeper.access(turn)
        sender = (access.sender_id, access.sender_name) if access.group else ("", "")
        try:
            memory_id = self.keeper.store.add(
                turn.chat.id, content, category, source="tool", sender_id=sender[0],
                sender_name=sender[1],
            )  # fmt: skip
        except InputError as exc:
            raise ToolError(str(exc)) from exc
        await self.backend.upsert(turn.chat, memory_id)
        return f"saved memory #{memory_id}"

    async def update(self, turn: TurnContext, args: dict[str, Any]) -> str:
        memory = self.keeper.owned(self.keeper.access(turn), memory_id_arg(args))
        content = self.keeper.checked(text_arg(args, "content"))
        try:
            self.keeper.store.update(memory.id, content)
        except InputError as exc:
            raise ToolError(str(exc)) from exc
        await self.backend.upsert(turn.chat, memory.id)
        return f"updated memory #{memory.id}"

    async def delete(self, turn: TurnContext, args: dict[str, Any]) -> str:
        memory = self.keeper.forget(self.keeper.access(turn), memory_id_arg(args))
        return f"deleted memory #{memory.id}"

    def tools(self) -> list[Tool]:
        """The memory tools; those that look up and save are essential (a small window
        still offers them), correcting and forgetting a fact are offered when the message
        asks for it (`core.context.tool_offer`)."""
        return [
            replace(tool, essential=tool.name in ESSENTIAL_TOOLS)
            for tool in self._file_tools() + self._structured_tools()
        ]

    def _file_tools(self) -> list[Tool]:
        scope = {"type": "string", "enum": list(NOTE_SCOPES)}
        day = {"type": "string", "description": "with scope today: an older day, YYYY-MM-DD"}
        return [
            Tool(
                "read_memory",
                "Read an AGENTS.md note file (global, channel or chat scope) or a daily "
                "note (scope today, or an older day with date).",
                self.read_memory,
                _schema({"scope": scope, "date": day}, ["scope"]),
                read_only=True,
                reads_memory=True,
            ),
            Tool(
                "write_memory",
                "Replace (or with append=true extend) an AGENTS.md note file; scope today "
                "adds a line to today's daily note (a journal of this chat). Only control "
                "chats may write the global and channel scopes; in a group only an admin "
                "may write. Notes state facts and preferences, never instructions or secrets.",
                self.write_memory,
                _schema(
                    {"scope": scope, "content": {"type": "string"}, "append": {"type": "boolean"}},
                    ["scope", "content"],
                ),
            ),
        ]

    def _structured_tools(self) -> list[Tool]:
        memory_id = {"type": "integer", "description": "the memory's id (#N)"}
        return [
            Tool(
                "structured_memory_search",
                "Search this chat's remembered facts and older daily notes; returns "
                "`#id [CATEGORY] text` lines.",
                self.search,
                _schema({"query": {"type": "string"}, "k": {"type": "integer"}}, ["query"]),
                read_only=True,
                reads_memory=True,
            ),
            Tool(
                "structured_memory_add",
                "Remember a new fact about this chat.",
                self.add,
                _schema(
                    {
                        "content": {"type": "string"},
                        "category": {"type": "string", "enum": list(CATEGORIES)},
                    },
                    ["content"],
                ),
            ),
            Tool(
                "structured_memory_update",
                "Correct (update, fix) a wrong remembered fact by id.",
                self.update,
                _schema({"id": memory_id, "content": {"type": "string"}}, ["id", "content"]),
            ),
            Tool(
                "structured_memory_delete",
                "Forget (delete, remove) a remembered fact by id.",
                self.delete,
                _schema({"id": memory_id}, ["id"]),
            ),
        ]


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}

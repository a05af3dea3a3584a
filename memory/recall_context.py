"""The recall parts the model sees: the "recalled" section of a request and the
`conversation_search` tool (Letta's, with date filters), both within the chat only."""

from __future__ import annotations

from datetime import date
from typing import Any

from core.api import ContextSection, Tool, TurnContext
from core.errors import ToolError
from memory.recall import Recaller
from memory.recall_index import RecallHit, RecallQuery
from memory.temporal import format_day

SECTION_KEY = "recalled"
SECTION_SOURCE = "earlier messages of this chat (recall index)"
SECTION_PRIORITY = 55  # just below the structured memories (60)
MAX_SEARCH_LIMIT = 30
DEFAULT_SEARCH_LIMIT = 8
TOOL_NAME = "conversation_search"
TOOL_DESCRIPTION = (
    "Search everything said earlier in this chat, including messages that are no longer"
    " in view. Returns matching messages (and the turns next to the best ones) with their"
    " date and speaker, oldest first. Use it for details the visible history and the memories"
    " do not have (a name, a place, when something happened)."
)
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words to look for."},
        "since": {
            "type": "string",
            "description": "Only messages on or after this day, YYYY-MM-DD.",
        },
        "until": {
            "type": "string",
            "description": "Only messages on or before this day, YYYY-MM-DD.",
        },
        "speaker": {"type": "string", "description": "Only messages of this person."},
        "limit": {"type": "integer", "description": f"At most this many (1-{MAX_SEARCH_LIMIT})."},
    },
    "required": ["query"],
}


def hit_line(hit: RecallHit, max_chars: int = 600) -> str:
    """`[8 May 2023] Ann: text (#123)`: the message, its day, speaker and row id."""
    content = " ".join(hit.content.split())
    if len(content) > max_chars:
        content = content[: max_chars - 1] + "…"
    day = f"[{format_day(hit.day)}] " if hit.day is not None else ""
    return f"{day}{hit.speaker}: {content} (#{hit.message_id})"


def recalled_section(hits: list[RecallHit]) -> ContextSection | None:
    if not hits:
        return None
    text = "\n".join(hit_line(hit) for hit in hits)
    return ContextSection(SECTION_KEY, SECTION_SOURCE, text, priority=SECTION_PRIORITY)


def day_arg(args: dict[str, Any], name: str) -> date | None:
    value = args.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ToolError(f"`{name}` must be a day as YYYY-MM-DD")
    try:
        return date.fromisoformat(value.strip()[:10])
    except ValueError:
        raise ToolError(f"`{name}` must be a day as YYYY-MM-DD, not {value!r}") from None


def limit_arg(args: dict[str, Any]) -> int:
    value = args.get("limit", DEFAULT_SEARCH_LIMIT)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool):
        raise ToolError("`limit` must be an integer")
    return min(max(value, 1), MAX_SEARCH_LIMIT)


def search_query(args: dict[str, Any], today: date) -> RecallQuery:
    text = args.get("query")
    if not isinstance(text, str) or not text.strip():
        raise ToolError("`query` must be a non-empty string")
    since, until = day_arg(args, "since"), day_arg(args, "until")
    if since is not None and until is not None and since > until:
        raise ToolError("`since` is after `until`")
    speaker = args.get("speaker") or ""
    if not isinstance(speaker, str):
        raise ToolError("`speaker` must be a name")
    return RecallQuery(text, limit_arg(args), since, until, today=today, speaker=speaker.strip())


def conversation_search_tool(recaller: Recaller, today: Any = date.today) -> Tool:
    async def conversation_search(turn: TurnContext, args: dict[str, Any]) -> str:
        query = search_query(args, today())
        await recaller.catch_up(turn.chat.id)  # the newest messages too
        hits = recaller.search(turn.chat.id, query)
        if not hits:
            return "no matching messages"
        hits.sort(key=lambda hit: hit.message_id)
        return "\n".join(hit_line(hit) for hit in hits)

    return Tool(
        TOOL_NAME,
        TOOL_DESCRIPTION,
        conversation_search,
        TOOL_PARAMETERS,
        read_only=True,
        reads_memory=True,
    )

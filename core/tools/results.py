"""Big tool results: stored in full as the chat's files (`core.storage.file_store`),
excerpted in history.

The excerpt names the file, and the `read_tool_result` tool lets the model read it back.
Stored results expire (CoPaw): each time one is stored, the chat's results older than
`tool_result_max_age_days` go, then the oldest until the rest fit
`tool_result_max_total_chars`; reading an expired one tells the model it expired.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from core.api import Chat, Tool, TurnContext
from core.chat.files import TOOL_RESULTS_DIR, chat_prefix, safe_path_part
from core.clock import utc_now
from core.config import Config
from core.errors import InputError, StorageError, ToolError
from core.storage.file_store import FileStore, clean_path
from core.text import clip_middle

logger = logging.getLogger(__name__)

READ_TOOL_NAME = "read_tool_result"
DEFAULT_READ_CHARS = 4_000


def excerpt_chars(limit: int) -> int:
    """How much of a stored big result stays in history (head and tail)."""
    return max(400, limit // 4)


def result_limit(config: Config, window_chars: int | None = None) -> int:
    """The largest tool result kept in history whole: `tool_result_max_chars`, at most a
    quarter of the usable window (`window_chars`, in characters) on a small window."""
    limit = config.context.tool_result_max_chars
    return limit if window_chars is None else max(500, min(limit, window_chars // 4))


def keep_tool_result(
    config: Config,
    files: FileStore,
    chat: Chat,
    call_id: str,
    name: str,
    result: str,
    *,
    window_chars: int | None = None,
) -> str:
    """`result` itself when small; else store it as a file and return an excerpt naming it."""
    limit = result_limit(config, window_chars)
    if len(result) <= limit or name == READ_TOOL_NAME:
        return result
    stamp = utc_now().strftime("%Y%m%dT%H%M%S%f")
    relative = f"{TOOL_RESULTS_DIR}/{stamp}-{safe_path_part(name)}-{safe_path_part(call_id)}.txt"
    path = f"{chat_prefix(chat)}/{relative}"
    try:
        files.write_text(path, result)
        expire_tool_results(config, files, chat)
    except (OSError, StorageError):
        logger.exception("could not store a %d-char result of %s at %s", len(result), name, path)
        note = f"[tool result of {len(result)} chars, excerpted; storing it in full failed]"
        return f"{note}\n{clip_middle(result, excerpt_chars(limit))}"
    note = (
        f"[tool result of {len(result)} chars stored in full at {relative}; "
        f"read more with {READ_TOOL_NAME}(path, offset)]"
    )
    return f"{note}\n{clip_middle(result, excerpt_chars(limit))}"


_STAMP = re.compile(r"/(\d{8}T\d{6})\d*-[^/]*$")


def stored_at(path: str) -> datetime | None:
    """When a stored result was written, from its name (None for a name without a stamp)."""
    match = _STAMP.search(path)
    if match is None:
        return None
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%S").replace(tzinfo=UTC)


def expire_tool_results(config: Config, files: FileStore, chat: Chat) -> list[str]:
    """Delete the chat's stored results past the age limit, then the oldest past the size
    limit; the paths deleted."""
    context = config.context
    paths = sorted(files.list(f"{chat_prefix(chat)}/{TOOL_RESULTS_DIR}"), reverse=True)
    now = utc_now()
    expired = []
    if context.tool_result_max_age_days:
        limit = now - timedelta(days=context.tool_result_max_age_days)
        expired = [path for path in paths if (stored_at(path) or now) < limit]
    kept = [path for path in paths if path not in expired]  # newest first
    if context.tool_result_max_total_chars:
        sizes = files.read_texts(kept)
        total = 0
        for index, path in enumerate(kept):  # the newest (just stored) always stays
            total += len(sizes.get(clean_path(path), ""))
            if index and total > context.tool_result_max_total_chars:
                expired.append(path)
    for path in expired:
        files.delete(path)
    if expired:
        logger.info("expired %d stored tool results of %s", len(expired), chat.key)
    return expired


def read_stored_result(config: Config, files: FileStore, chat: Chat, args: dict[str, Any]) -> str:
    """Part of a stored tool result of this chat (`path`, `offset`, `length`)."""
    relative = str(args.get("path") or "").strip()
    try:
        offset = max(0, int(args.get("offset") or 0))
        length = int(args.get("length") or DEFAULT_READ_CHARS)
    except (TypeError, ValueError) as exc:
        raise ToolError("offset and length must be integers") from exc
    length = max(1, min(length, config.context.tool_result_max_chars - 200))
    try:
        inside = clean_path(relative).startswith(f"{TOOL_RESULTS_DIR}/")
    except InputError:
        inside = False
    if not inside:
        raise ToolError(f"path must be a file under {TOOL_RESULTS_DIR}/ as named in the excerpt")
    text = files.read_text(f"{chat_prefix(chat)}/{clean_path(relative)}")
    if text is None:
        raise ToolError(
            f"the stored tool result at {relative} has expired (stored results are kept"
            f" {config.context.tool_result_max_age_days} days and"
            f" {config.context.tool_result_max_total_chars} chars per chat);"
            " call the tool again if you still need it"
        )
    chunk = text[offset : offset + length]
    return f"[{relative}: chars {offset}-{offset + len(chunk)} of {len(text)}]\n{chunk}"


def read_tool(config: Config, files: FileStore) -> Tool:
    """The `read_tool_result` tool for the chats of this config."""

    async def read_tool_result(turn: TurnContext, args: dict[str, Any]) -> str:
        return read_stored_result(config, files, turn.chat, args)

    return Tool(
        READ_TOOL_NAME,
        "Read part of a large earlier tool result that was stored as a file "
        "(the excerpt in the conversation names its path).",
        read_tool_result,
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "the path named in the excerpt"},
                "offset": {"type": "integer", "description": "first character to read (0)"},
                "length": {"type": "integer", "description": "characters to read (4000)"},
            },
            "required": ["path"],
        },
        read_only=True,
    )

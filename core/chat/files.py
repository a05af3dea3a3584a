"""Where a chat's files live: <channel>/<safe chat id>/ (tool results, compaction archive),
under the data dir on SQLite, in `stored_files` on PostgreSQL (`core.storage.file_store`)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from core.api import Chat
from core.config import Config

TOOL_RESULTS_DIR = "tool-results"
ARCHIVE_DIR = "archive"
MAX_PART_CHARS = 96
_SAFE = re.compile(r"[A-Za-z0-9_-]")


def safe_path_part(text: str) -> str:
    """`text` as one portable, collision-free path component: letters, digits, `_` and `-`
    stay, every other character becomes its UTF-8 bytes as `%XX` (no `.`, separator or NUL
    survives). Longer than 96 chars: a 48-char prefix, `~` and a SHA-256 digest.

    `memory.files` uses it too, so a chat's AGENTS.md, stored tool results and compaction
    archive share one directory.
    """
    encoded = "".join(
        char if _SAFE.fullmatch(char) else "".join(f"%{b:02X}" for b in char.encode("utf-8"))
        for char in text
    )
    if not encoded:
        return "%00"
    if len(encoded) > MAX_PART_CHARS:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
        encoded = f"{encoded[:48]}~{digest}"
    return encoded


def chat_prefix(chat: Chat) -> str:
    """The chat's own directory as a `FileStore` names it: `telegram/42`."""
    return f"{safe_path_part(chat.channel)}/{safe_path_part(chat.external_chat_id)}"


def chat_dir(config: Config, chat: Chat) -> Path:
    """The chat's own directory under `[storage] data_dir` (not created here)."""
    return (
        config.storage.data_dir
        / safe_path_part(chat.channel)
        / safe_path_part(chat.external_chat_id)
    )

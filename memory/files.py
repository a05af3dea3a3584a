"""File memory: AGENTS.md notes in three scopes (global, channel, chat), in the file store.

Chat ids and channel names come from outside, so every path segment is built from a
reversible, separator-free encoding of them (`safe_segment`); nothing can leave the data dir.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.api import ContextSection
from core.chat.files import safe_path_part
from core.storage.file_store import DirectoryFileStore, FileStore, clean_path
from core.text import clip_middle
from memory.hidden_text import visible_text

FILE_NAME = "AGENTS.md"
SCOPES = ("global", "channel", "chat")
MAX_WRITE_CHARS = 200_000
MIN_SECTION_CHARS = 400  # below this a clipped block says little (and its marker could overrun)
SCOPE_PRIORITY = {"global": 70, "channel": 65, "chat": 80}


def safe_segment(name: str) -> str:
    """A file-name-safe, collision-free encoding of `name` (see `core.chat.files`).

    Letters, digits, `_` and `-` stay; everything else (`.`, `/`, `\\`, `%`, NUL, …)
    becomes `%XX`, so no `..`, separator or absolute path survives. The chat's AGENTS.md,
    stored tool results and compaction archive share one directory this way.
    """
    return safe_path_part(name)


@dataclass(frozen=True)
class FileScope:
    scope: str
    path: str  # relative to the data dir, '/'-separated (the file store's name for it)
    label: str  # shown as the section's source: the same relative path


class FileMemory:
    """Reads, writes and budgets the AGENTS.md files of one deployment, through a
    `core.storage.file_store.FileStore`: files under the data dir on SQLite, rows of `stored_files`
    on PostgreSQL (so every machine reads the same notes). A `Path` means the directory."""

    def __init__(self, files: FileStore | Path) -> None:
        self.files: FileStore = (
            DirectoryFileStore(Path(files)) if isinstance(files, (str, Path)) else files
        )

    def scope(self, scope: str, channel: str, chat_id: str) -> FileScope:
        if scope == "global":
            parts: list[str] = []
        elif scope == "channel":
            parts = [safe_segment(channel)]
        elif scope == "chat":
            parts = [safe_segment(channel), safe_segment(chat_id)]
        else:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        path = "/".join([*parts, FILE_NAME])
        return FileScope(scope, path, path)

    def read(self, scope: str, channel: str, chat_id: str) -> str:
        return self.files.read_text(self.scope(scope, channel, chat_id).path) or ""

    def exists(self, scope: str, channel: str, chat_id: str) -> bool:
        return self.files.read_text(self.scope(scope, channel, chat_id).path) is not None

    def write(self, scope: str, channel: str, chat_id: str, content: str) -> str:
        """Replace the scope's file atomically (a crash leaves the old or the new text);
        return where it is (`FileStore.location`)."""
        if len(content) > MAX_WRITE_CHARS:
            raise ValueError(f"content is {len(content)} chars; the limit is {MAX_WRITE_CHARS}")
        path = self.scope(scope, channel, chat_id).path
        self.files.write_text(path, content)
        return self.files.location(path)

    def delete(self, scope: str, channel: str, chat_id: str) -> bool:
        """Delete the scope's file; True if it existed."""
        return self.files.delete(self.scope(scope, channel, chat_id).path)

    def sections(
        self, channel: str, chat_id: str, scope_max_chars: int, total_max_chars: int
    ) -> list[ContextSection]:
        """The non-empty scopes as context sections, global first, within both budgets,
        without hidden characters."""
        scopes = [self.scope(scope, channel, chat_id) for scope in SCOPES]
        found = self.files.read_texts([where.path for where in scopes])
        # Notes written before the gate, or by hand, may hold hidden characters: never sent.
        texts = [(where, visible_text(found.get(clean_path(where.path), ""))) for where in scopes]
        budgeted = budget_texts([text for _, text in texts], scope_max_chars, total_max_chars)
        return [
            ContextSection(
                key=f"file_memory_{where.scope}",
                source=where.label,
                text=text,
                priority=SCOPE_PRIORITY[where.scope],
                scope=where.scope,
                reason=f"the {where.scope} AGENTS.md: notes are always included",
            )
            for (where, _), text in zip(texts, budgeted, strict=True)
            if text.strip()
        ]


def budget_texts(texts: list[str], scope_max_chars: int, total_max_chars: int) -> list[str]:
    """Clip each text to `scope_max_chars`, then earlier texts first to `total_max_chars`.

    Clipping keeps 70% head and 20% tail around a `[truncated: N chars]` marker. A text
    whose remaining share would be under MIN_SECTION_CHARS is dropped ("").
    """
    result: list[str] = []
    remaining = total_max_chars
    for text in texts:
        text = text.strip()
        if not text:
            result.append("")
            continue
        clipped = clip_middle(text, scope_max_chars)
        if len(clipped) > remaining:
            clipped = clip_middle(text, remaining) if remaining >= MIN_SECTION_CHARS else ""
        remaining -= len(clipped)
        result.append(clipped)
    return result

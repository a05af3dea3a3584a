"""Daily notes (LiberClaw): a per-chat journal, one `YYYY-MM-DD.md` beside the chat's
AGENTS.md, written through `write_memory` with scope `today` (always appended, under the
same gate and group rules as the chat's notes, `memory.notes`).

Today's and yesterday's notes are injected in the dynamic part of the request; older days
are never injected whole: `structured_memory_search` finds their lines, and `read_memory`
with scope `today` and a `date` reads one day.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from core.api import ContextSection
from core.clock import utc_now
from memory.files import FileMemory
from memory.hidden_text import visible_text

SECTION_KEY = "daily_notes"
SECTION_PRIORITY = 75
DAY_FILE = re.compile(r"/(\d{4}-\d{2}-\d{2})\.md$")
MAX_DAY_CHARS = 20_000
SEARCH_HITS = 5
_TERM = re.compile(r"\w{3,}")


def today() -> date:
    return utc_now().date()


def parse_day(text: str) -> date:
    """A `YYYY-MM-DD` date; ValueError for anything else."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text.strip()):
        raise ValueError(f"date must be YYYY-MM-DD, not {text!r}")
    return date.fromisoformat(text.strip())


class DailyNotes:
    """One chat's daily notes in the file store, beside its AGENTS.md."""

    def __init__(self, files: FileMemory, channel: str, chat_id: str) -> None:
        self.store = files.files
        self.folder = files.scope("chat", channel, chat_id).path.rsplit("/", 1)[0]
        self.depth = self.folder.count("/") + 1  # of a file directly in the folder

    def path(self, day: date) -> str:
        return f"{self.folder}/{day.isoformat()}.md"

    def read(self, day: date) -> str:
        return self.store.read_text(self.path(day)) or ""

    def append(self, day: date, text: str) -> int:
        """Add `text` as a new line of the day's note; the note's length after."""
        old = self.read(day).rstrip("\n")
        content = f"{old}\n{text.strip()}" if old else text.strip()
        if len(content) > MAX_DAY_CHARS:
            raise ValueError(f"the note of {day} would be {len(content)} chars (at most 20000)")
        self.store.write_text(self.path(day), content + "\n")
        return len(content)

    def days(self) -> list[date]:
        """The days with a note, oldest first."""
        mine = (path for path in self.store.list(self.folder) if path.count("/") == self.depth)
        found = (DAY_FILE.search(path) for path in mine)
        return sorted(date.fromisoformat(match.group(1)) for match in found if match)

    def section(self, on: date) -> ContextSection | None:
        """Today's and yesterday's notes as one context section (None when both are empty)."""
        parts = []
        for day, label in ((on - timedelta(days=1), "yesterday"), (on, "today")):
            text = visible_text(self.read(day)).strip()
            if text:
                parts.append(f"## {day.isoformat()} ({label})\n{text}")
        if not parts:
            return None
        return ContextSection(
            SECTION_KEY, f"{self.folder}/YYYY-MM-DD.md", "\n\n".join(parts), SECTION_PRIORITY,
            scope="chat", reason="today's and yesterday's daily notes are always included",
        )  # fmt: skip

    def search(self, query: str, before: date, limit: int = SEARCH_HITS) -> list[str]:
        """Lines of the notes before `before` (older days, never injected) that share a
        word with `query`, newest day first, as `YYYY-MM-DD: line`."""
        terms = {term.lower() for term in _TERM.findall(query)}
        hits: list[str] = []
        for day in reversed([day for day in self.days() if day < before - timedelta(days=1)]):
            for line in visible_text(self.read(day)).splitlines():
                if terms & {word.lower() for word in _TERM.findall(line)}:
                    hits.append(f"{day.isoformat()}: {line.strip()}")
                    if len(hits) >= limit:
                        return hits
        return hits

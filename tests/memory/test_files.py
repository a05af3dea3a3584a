"""File memory: safe paths from outside chat ids, scopes, budgets and truncation arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.text import clip_middle
from memory.files import MIN_SECTION_CHARS, FileMemory, budget_texts, safe_segment
from memory.stores import file_memory
from tests.memory.conftest import Engine

HOSTILE_IDS = [
    "..",
    ".",
    "../../etc/passwd",
    "/etc/passwd",
    "a/b",
    "a\\b",
    "C:\\x",
    "~root",
    "",
    "%2E%2E",
    "x\x00y",
    "-100123456",
    "名前",
    "a" * 500,
    " spaced out ",
]


@pytest.mark.parametrize("chat_id", HOSTILE_IDS)
def test_chat_ids_cannot_escape_the_data_dir(tmp_path: Path, chat_id: str) -> None:
    files = FileMemory(tmp_path / "data")
    path = Path(files.write("chat", "telegram", chat_id, "note"))
    segment = safe_segment(chat_id)
    assert path.resolve().is_relative_to((tmp_path / "data").resolve())
    assert path == (tmp_path / "data" / "telegram" / segment / "AGENTS.md").resolve()
    assert "/" not in segment and "\\" not in segment and ".." not in segment
    assert "\x00" not in segment and not segment.startswith(".")
    assert len(segment) <= 96
    assert files.read("chat", "telegram", chat_id) == "note"


def test_encoding_is_collision_free_for_lookalikes() -> None:
    ids = ["a/b", "a%2Fb", "a_b", "a.b", "a-b", "A/B"]
    assert len({safe_segment(i) for i in ids}) == len(ids)
    assert safe_segment("-100123") == "-100123"  # plain ids stay readable


def test_hostile_channel_name_is_encoded_too(tmp_path: Path) -> None:
    files = FileMemory(tmp_path)
    path = Path(files.write("channel", "../evil", "1", "x"))
    assert path.parent.name == safe_segment("../evil")
    assert path.parent.parent == tmp_path.resolve()


def test_scopes_are_separate_files_and_sections_come_global_first(engine: Engine) -> None:
    """On SQLite the notes are files under the data dir; on PostgreSQL rows every machine
    reads (`stored_files`): the same scopes, sections and deletes either way."""
    files = file_memory(engine.storage, engine.data_dir)
    files.write("chat", "telegram", "42", "chat note")
    files.write("global", "telegram", "42", "global note")
    files.write("channel", "telegram", "42", "channel note")
    sections = files.sections("telegram", "42", 20_000, 50_000)
    assert [s.key for s in sections] == [
        "file_memory_global",
        "file_memory_channel",
        "file_memory_chat",
    ]
    assert [s.text for s in sections] == ["global note", "channel note", "chat note"]
    assert sections[0].source == "AGENTS.md"
    assert sections[2].source == "telegram/42/AGENTS.md"
    assert files.sections("telegram", "43", 20_000, 50_000)[-1].text == "channel note"
    assert files.exists("chat", "telegram", "42") and not files.exists("chat", "telegram", "43")
    assert files.delete("chat", "telegram", "42") and not files.delete("chat", "telegram", "42")
    assert files.read("chat", "telegram", "42") == ""
    assert files.read("global", "", "") == "global note"
    on_disk = (engine.data_dir / "AGENTS.md").is_file()
    assert on_disk == (engine.name == "sqlite")  # PostgreSQL keeps no file on this machine


def test_scope_budget_cuts_70_head_20_tail_with_marker() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(10_000))
    [clipped] = budget_texts([text], 1000, 50_000)
    head, tail = int(1000 * 0.7), int(1000 * 0.2)
    removed = 10_000 - head - tail
    assert clipped == f"{text[:head]}\n[truncated: {removed} chars]\n{text[-tail:]}"
    assert clipped == clip_middle(text, 1000)


def test_total_budget_prefers_earlier_scopes_and_drops_scraps() -> None:
    texts = ["g" * 3000, "c" * 3000, "x" * 3000]
    result = budget_texts(texts, 20_000, 5000)
    assert result[0] == "g" * 3000
    assert len(result[1]) <= 2000 and "[truncated: " in result[1]
    assert result[2] == ""  # nothing useful fits any more
    assert sum(len(t) for t in result) <= 5000
    short = budget_texts(["g" * 4800, "c" * 3000], 20_000, 4800 + MIN_SECTION_CHARS - 1)
    assert short[1] == ""


def test_under_budget_files_are_untouched() -> None:
    assert budget_texts(["  a  ", "", "b"], 100, 100) == ["a", "", "b"]

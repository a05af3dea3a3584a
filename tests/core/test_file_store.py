"""The chats' files behave the same as files under the data dir (SQLite deployments) and as
rows in PostgreSQL (`stored_files`): read, atomic replace, delete, trees, and no escaping."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import StorageConfig
from core.errors import InputError
from core.storage.engine import open_storage
from core.storage.file_store import DatabaseFileStore, DirectoryFileStore, FileStore, clean_path


@pytest.fixture(params=["directory", "database"])
def files(request: pytest.FixtureRequest, tmp_path: Path, storage_url: str) -> Iterator[FileStore]:
    """Files under a directory, and as rows of `stored_files` on each engine."""
    if request.param == "directory":
        if storage_url.startswith("postgresql"):
            pytest.skip("the directory store needs no database")
        yield DirectoryFileStore(tmp_path / "data")
        return
    storage = open_storage(StorageConfig(url=storage_url))
    yield DatabaseFileStore(storage.database)
    storage.close()


def test_write_read_replace_delete(files: FileStore) -> None:
    assert files.read_text("telegram/42/AGENTS.md") is None
    files.write_text("telegram/42/AGENTS.md", "Ann likes tea")
    files.write_text("telegram/42/AGENTS.md", "Ann likes coffee — ☕")
    assert files.read_text("telegram/42/AGENTS.md") == "Ann likes coffee — ☕"
    assert files.delete("telegram/42/AGENTS.md") is True
    assert files.delete("telegram/42/AGENTS.md") is False
    assert files.read_text("telegram/42/AGENTS.md") is None


def test_binary_files_round_trip_and_go_with_their_tree(files: FileStore) -> None:
    """Images and voice notes (`core.chat.media`): any bytes, NULs and invalid UTF-8 too."""
    data = bytes(range(256)) * 40
    assert files.read_bytes("telegram/42/media/a.jpg") is None
    files.write_bytes("telegram/42/media/a.jpg", data)
    assert files.read_bytes("telegram/42/media/a.jpg") == data
    assert files.list("telegram/42/") == ["telegram/42/media/a.jpg"]
    assert files.delete_tree("telegram/42") == 1
    assert files.read_bytes("telegram/42/media/a.jpg") is None


def test_trees_list_and_delete_only_their_own_files(files: FileStore) -> None:
    files.write_text("telegram/42/AGENTS.md", "a")
    files.write_text("telegram/42/archive/one.md", "b")
    files.write_text("telegram/421/AGENTS.md", "c")  # a sibling whose name starts the same
    files.write_text("AGENTS.md", "global")
    assert files.list("telegram/42") == ["telegram/42/AGENTS.md", "telegram/42/archive/one.md"]
    assert files.list("") == sorted(
        [
            "AGENTS.md",
            "telegram/42/AGENTS.md",
            "telegram/42/archive/one.md",
            "telegram/421/AGENTS.md",
        ]
    )
    assert files.delete_tree("telegram/42/") == 2
    assert files.list("") == ["AGENTS.md", "telegram/421/AGENTS.md"]


@pytest.mark.parametrize("bad", ["../outside", "/etc/passwd", "a/../../b", ""])
def test_paths_cannot_leave_the_data_dir(files: FileStore, bad: str) -> None:
    with pytest.raises(InputError):
        files.write_text(bad, "x")


def test_the_location_says_where_a_file_is(files: FileStore, tmp_path: Path) -> None:
    where = files.location("telegram/42/AGENTS.md")
    assert where in (
        str((tmp_path / "data/telegram/42/AGENTS.md").resolve()),
        "postgresql:telegram/42/AGENTS.md",
        "sqlite:telegram/42/AGENTS.md",
    )


def test_several_files_are_read_at_once(files: FileStore) -> None:
    files.write_text("AGENTS.md", "global")
    files.write_text("telegram/42/AGENTS.md", "chat")
    assert files.read_texts(["AGENTS.md", "telegram/AGENTS.md", "telegram/42/AGENTS.md"]) == {
        "AGENTS.md": "global",
        "telegram/42/AGENTS.md": "chat",
    }


def test_a_path_cleaned_each_turn_is_cleaned_once_and_a_bad_one_is_refused_each_time() -> None:
    """Every turn cleans the same memory and skill paths: remembered, not parsed again."""
    before = clean_path.cache_info().hits
    assert clean_path("memory\\MEMORY.md") == clean_path("memory\\MEMORY.md") == "memory/MEMORY.md"
    assert clean_path.cache_info().hits == before + 1
    for _ in range(2):
        with pytest.raises(InputError, match="not a path inside"):
            clean_path("../outside")

"""Where a chat's files live: AGENTS.md file memory, stored tool results, compaction archives.

Paths are relative to the data dir and use `/` (`telegram/42/tool-results/…txt`). On SQLite
(one machine) they are real files under `[storage] data_dir`, so an operator can read and
edit them; on PostgreSQL they are rows of `stored_files` (`DatabaseFileStore`), so a bot
process on any machine reads the same memory. `mnemo chat export` still writes Markdown.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol

from core.errors import InputError
from core.storage.database import Database

BASE64_MARK = "base64:"  # a binary file's content in `stored_files` (a TEXT column)


class FileStore(Protocol):
    def read_text(self, path: str) -> str | None:
        """The file's text, or None if there is no such file."""
        ...

    def read_texts(self, paths: list[str]) -> dict[str, str]:
        """The texts of those of `paths` that exist (one round trip on PostgreSQL)."""
        ...

    def write_text(self, path: str, text: str) -> None:
        """Create or replace the file atomically (a crash leaves the old or the new text)."""
        ...

    def read_bytes(self, path: str) -> bytes | None:
        """A binary file's bytes (an image, a voice note), or None if there is none."""
        ...

    def write_bytes(self, path: str, data: bytes) -> None:
        """Create or replace a binary file atomically."""
        ...

    def delete(self, path: str) -> bool:
        """Delete one file; True if it existed."""
        ...

    def delete_tree(self, prefix: str) -> int:
        """Delete every file under the directory `prefix`; how many there were."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Every file under the directory `prefix` (recursively), sorted."""
        ...

    def location(self, path: str) -> str:
        """Where `path` is, for people: an absolute file path, or `postgresql:<path>`."""
        ...

    def stamps(self, prefixes: Sequence[str], file_name: str = "") -> dict[str, str]:
        """{path: version stamp} of every file under the directories `prefixes` (one round
        trip on PostgreSQL); with `file_name`, only the files of that name one folder down
        (`<prefix><folder>/<file_name>`). A stamp changes whenever the file is written, so
        a cache keyed on it never serves an old parse (`core.skills` scans each turn)."""
        ...

    def stays_inside(self, path: str, directory: str) -> bool:
        """True if reading `path` reads a file inside `directory`: no symbolic link (on
        the data dir) leads out of it. Rows on PostgreSQL cannot be links."""
        ...


@functools.lru_cache(maxsize=4096)
def clean_path(path: str) -> str:
    """`path` as a normalised relative path; an error for absolute paths, `..` and empties.
    Remembered: every turn cleans the same few paths (memory files, skill folders) again."""
    pure = PurePosixPath(path.replace("\\", "/"))
    if pure.is_absolute() or not pure.parts or any(part in ("..", ".") for part in pure.parts):
        raise InputError(f"{path!r} is not a path inside the data dir")
    return pure.as_posix()


@functools.lru_cache(maxsize=1024)
def clean_prefix(prefix: str) -> str:
    """A directory prefix ('' for everything) with one trailing `/`."""
    return "" if prefix.strip("/") == "" else clean_path(prefix.strip("/")) + "/"


class DirectoryFileStore:
    """Files under one directory (the SQLite deployment's data dir)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _path(self, path: str) -> Path:
        return self.root / clean_path(path)

    def read_text(self, path: str) -> str | None:
        try:
            return self._path(path).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def read_texts(self, paths: list[str]) -> dict[str, str]:
        found = {path: self.read_text(path) for path in paths}
        return {path: text for path, text in found.items() if text is not None}

    def write_text(self, path: str, text: str) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, target)

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self._path(path).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        temporary.write_bytes(data)
        os.replace(temporary, target)

    def delete(self, path: str) -> bool:
        target = self._path(path)
        for leftover in target.parent.glob(f".{target.name}.*.tmp"):
            leftover.unlink(missing_ok=True)
        try:
            target.unlink()
        except (FileNotFoundError, IsADirectoryError):
            return False
        return True

    def delete_tree(self, prefix: str) -> int:
        names = self.list(prefix)
        for name in names:
            self.delete(name)
        directory = self.root / clean_prefix(prefix)
        for sub in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if sub.is_dir():
                _remove_if_empty(sub)
        if clean_prefix(prefix):
            _remove_if_empty(directory)
        return len(names)

    def list(self, prefix: str) -> list[str]:
        directory = self.root / clean_prefix(prefix)
        if not directory.is_dir():
            return []
        return sorted(
            path.relative_to(self.root).as_posix()
            for path in directory.rglob("*")
            if path.is_file() and not path.name.endswith(".tmp")
        )

    def location(self, path: str) -> str:
        return str(self._path(path).resolve())

    def stamps(self, prefixes: Sequence[str], file_name: str = "") -> dict[str, str]:
        """mtime (ns) and size, from `os.scandir` (pathlib's rglob is many times slower)."""
        found: dict[str, str] = {}
        for prefix in prefixes:
            relative = clean_prefix(prefix)
            directory = os.path.join(self.root, relative)
            if file_name:
                found.update(_named_stamps(directory, relative, file_name))
            else:
                found.update(_walk_stamps(directory, relative))
        return found

    def stays_inside(self, path: str, directory: str) -> bool:
        inside = (self.root / clean_prefix(directory)).resolve()
        return self._path(path).resolve().is_relative_to(inside)


def _stamp(path: str) -> str | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return f"{status.st_mtime_ns}:{status.st_size}" if stat.S_ISREG(status.st_mode) else None


def _named_stamps(directory: str, relative: str, file_name: str) -> dict[str, str]:
    """{relative path: stamp} of `<directory>/*/<file_name>`."""
    found: dict[str, str] = {}
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        stamp = _stamp(os.path.join(entry.path, file_name))
        if stamp is not None:
            found[f"{relative}{entry.name}/{file_name}"] = stamp
    return found


def _walk_stamps(directory: str, relative: str) -> dict[str, str]:
    """{relative path: "mtime_ns:size"} of the files under `directory` (links to directories
    are not entered; temporary files of an atomic write are left out)."""
    found: dict[str, str] = {}
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return found
    for entry in entries:
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                found.update(_walk_stamps(entry.path, f"{relative}{entry.name}/"))
            elif entry.is_file() and not entry.name.endswith(".tmp"):
                status = entry.stat()
                found[relative + entry.name] = f"{status.st_mtime_ns}:{status.st_size}"
    return found


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):
        directory.rmdir()


class DatabaseFileStore:
    """Files as rows of `stored_files` (the PostgreSQL deployment: seen by every machine)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def read_text(self, path: str) -> str | None:
        row = self.db.read_one(
            "SELECT content FROM stored_files WHERE path = ?", (clean_path(path),)
        )
        return None if row is None else str(row[0])

    def read_texts(self, paths: list[str]) -> dict[str, str]:
        if not paths:
            return {}
        in_paths, params = self.db.dialect.in_values("path", [clean_path(path) for path in paths])
        rows = self.db.read(f"SELECT path, content FROM stored_files WHERE {in_paths}", params)
        return {str(path): str(content) for path, content in rows}

    def write_text(self, path: str, text: str) -> None:
        self.db.write(
            "INSERT INTO stored_files (path, content) VALUES (?, ?) ON CONFLICT (path)"
            " DO UPDATE SET content = excluded.content, updated_at = mnemo_now()",
            (clean_path(path), text),
        )

    def read_bytes(self, path: str) -> bytes | None:
        """A binary file is a row whose content is `base64:` and its bytes in base64."""
        text = self.read_text(path)
        if text is None:
            return None
        if text.startswith(BASE64_MARK):
            return base64.b64decode(text[len(BASE64_MARK) :])
        return text.encode("utf-8")

    def write_bytes(self, path: str, data: bytes) -> None:
        self.write_text(path, BASE64_MARK + base64.b64encode(data).decode("ascii"))

    def delete(self, path: str) -> bool:
        return self.db.write("DELETE FROM stored_files WHERE path = ?", (clean_path(path),)) > 0

    def delete_tree(self, prefix: str) -> int:
        return self.db.write(
            "DELETE FROM stored_files WHERE substr(path, 1, length(?)) = ?",
            (clean_prefix(prefix),) * 2,
        )

    def list(self, prefix: str) -> list[str]:
        rows = self.db.read(
            "SELECT path FROM stored_files WHERE substr(path, 1, length(?)) = ? ORDER BY path",
            (clean_prefix(prefix),) * 2,
        )
        return [str(row[0]) for row in rows]

    def stamps(self, prefixes: Sequence[str], file_name: str = "") -> dict[str, str]:
        cleaned = [clean_prefix(prefix) for prefix in prefixes]
        if not cleaned:
            return {}
        under = " OR ".join(["substr(path, 1, ?) = ?"] * len(cleaned))
        params = [value for prefix in cleaned for value in (len(prefix), prefix)]
        rows = self.db.read(
            "SELECT path, CAST(updated_at AS TEXT) || ':' || CAST(length(content) AS TEXT)"
            f" FROM stored_files WHERE {under} ORDER BY path",
            params,
        )
        return {
            str(path): str(stamp)
            for path, stamp in rows
            if not file_name or _one_down(str(path), cleaned, file_name)
        }

    def stays_inside(self, path: str, directory: str) -> bool:
        return clean_path(path).startswith(clean_prefix(directory))

    def location(self, path: str) -> str:
        return f"{self.db.dialect.engine}:{clean_path(path)}"


def _one_down(path: str, prefixes: list[str], file_name: str) -> bool:
    """True if `path` is `<prefix><folder>/<file_name>` for one of `prefixes`."""
    for prefix in prefixes:
        folder = path[len(prefix) : -len(file_name) - 1] if path.startswith(prefix) else ""
        if folder and "/" not in folder and path.endswith("/" + file_name):
            return True
    return False

"""`FileStore` on PostgreSQL: a chat's files as rows of `stored_files`, seen by every machine."""

from __future__ import annotations

from collections.abc import Sequence

from core.file_store import clean_path, clean_prefix
from core.pg_db import PgDatabase


class PgFileStore:
    def __init__(self, db: PgDatabase) -> None:
        self.db = db

    def read_text(self, path: str) -> str | None:
        row = self.db.read_one(
            "SELECT content FROM stored_files WHERE path = %s", (clean_path(path),)
        )
        return None if row is None else str(row[0])

    def read_texts(self, paths: list[str]) -> dict[str, str]:
        rows = self.db.read(
            "SELECT path, content FROM stored_files WHERE path = ANY(%s)",
            ([clean_path(path) for path in paths],),
        )
        return {str(path): str(content) for path, content in rows}

    def write_text(self, path: str, text: str) -> None:
        self.db.write(
            "INSERT INTO stored_files (path, content) VALUES (%s, %s) ON CONFLICT (path)"
            " DO UPDATE SET content = excluded.content, updated_at = mnemo_now()",
            (clean_path(path), text),
        )

    def delete(self, path: str) -> bool:
        return self.db.write("DELETE FROM stored_files WHERE path = %s", (clean_path(path),)) > 0

    def delete_tree(self, prefix: str) -> int:
        return self.db.write(
            "DELETE FROM stored_files WHERE starts_with(path, %s)", (clean_prefix(prefix),)
        )

    def list(self, prefix: str) -> list[str]:
        rows = self.db.read(
            "SELECT path FROM stored_files WHERE starts_with(path, %s) ORDER BY path",
            (clean_prefix(prefix),),
        )
        return [str(row[0]) for row in rows]

    def stamps(self, prefixes: Sequence[str], file_name: str = "") -> dict[str, str]:
        cleaned = [clean_prefix(prefix) for prefix in prefixes]
        rows = self.db.read(
            "SELECT path, updated_at || ':' || md5(content) FROM stored_files"
            " WHERE path ^@ ANY(%s) AND (%s = '' OR right(path, %s) = %s) ORDER BY path",
            (cleaned, file_name, len(file_name) + 1, f"/{file_name}"),
        )
        return {
            str(path): str(stamp)
            for path, stamp in rows
            if not file_name or _one_down(str(path), cleaned, file_name)
        }

    def stays_inside(self, path: str, directory: str) -> bool:
        return clean_path(path).startswith(clean_prefix(directory))

    def location(self, path: str) -> str:
        return f"postgresql:{clean_path(path)}"


def _one_down(path: str, prefixes: list[str], file_name: str) -> bool:
    """True if `path` is `<prefix><folder>/<file_name>` for one of `prefixes`."""
    for prefix in prefixes:
        folder = path[len(prefix) : -len(file_name) - 1] if path.startswith(prefix) else ""
        if folder and "/" not in folder:
            return True
    return False

"""`FileStore` on PostgreSQL: a chat's files as rows of `stored_files`, seen by every machine."""

from __future__ import annotations

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

    def location(self, path: str) -> str:
        return f"postgresql:{clean_path(path)}"

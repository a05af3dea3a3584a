"""What truly differs between SQLite and PostgreSQL SQL, in one place (the stores write one
SQL text with `?` placeholders; this module turns it into each engine's spelling).

Everything else is written once in portable SQL: `INSERT … ON CONFLICT … DO UPDATE`,
`RETURNING`, `count(*) FILTER (WHERE …)`, `CAST(? AS TEXT)`, and `mnemo_now()` for the
current time as ISO-8601 UTC text (a function on PostgreSQL, `strftime` on SQLite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

Engine = Literal["sqlite", "postgresql"]
SQLITE_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"


@dataclass(frozen=True)
class Dialect:
    """One engine's spelling of what differs, and what a store may want to know of it."""

    engine: Engine
    # A statement is a network round trip (cache slow-changing reads, batch writes).
    remote: bool
    # Row locks (`FOR UPDATE … SKIP LOCKED`, advisory locks) for writers on many machines;
    # without them (SQLite) `BEGIN IMMEDIATE` already makes every other writer wait.
    row_locks: bool
    # Suffixes of a `SELECT` that lock its rows until this transaction ends ('' on SQLite).
    for_share: str
    for_update: str

    def in_values(self, column: str, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """`column` is one of `values`: the condition and its parameters (an array bound as
        one parameter on PostgreSQL, so its statement text is one whatever the count)."""
        if self.engine == "postgresql":
            if values and all(type(value) is int for value in values):
                # Ids as one array literal the server parses: psycopg dumps a list of ints
                # element by element in Python (~0.2 ms for a ranking's 140 candidates).
                return f"{column} = ANY(CAST(? AS BIGINT[]))", (
                    "{" + ",".join(map(str, values)) + "}",
                )
            return f"{column} = ANY(?)", (list(values),)
        marks = ", ".join("?" for _ in values)
        return f"{column} IN ({marks})", tuple(values)


SQLITE = Dialect(engine="sqlite", remote=False, row_locks=False, for_share="", for_update="")
POSTGRESQL = Dialect(
    engine="postgresql",
    remote=True,
    row_locks=True,
    for_share=" FOR SHARE",
    for_update=" FOR UPDATE",
)


@lru_cache(maxsize=4096)
def sqlite_sql(sql: str) -> str:
    """`sql` as SQLite runs it: `mnemo_now()` spelled with `strftime` (cached per text)."""
    return sql.replace("mnemo_now()", SQLITE_NOW)


@lru_cache(maxsize=4096)
def postgresql_sql(sql: str) -> str:
    """`sql` with psycopg's placeholders: a literal `%` doubles and `?` becomes `%s`, except
    a `?` inside a quoted string (cached per text)."""
    parts = sql.replace("%", "%%").split("'")
    for index in range(0, len(parts), 2):  # even parts are outside string literals
        parts[index] = parts[index].replace("?", "%s")
    return "'".join(parts)

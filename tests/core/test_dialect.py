"""`core.storage.dialect`: what differs between the engines' SQL."""

from __future__ import annotations

from core.storage.dialect import POSTGRESQL, SQLITE


def test_in_values_binds_ids_as_one_array_literal_on_postgresql() -> None:
    """Integer ids go as one text literal cast in the server (psycopg dumps a list of ints
    element by element in Python); other values as a list; SQLite binds each one."""
    assert POSTGRESQL.in_values("id", [3, 1, 2]) == ("id = ANY(CAST(? AS BIGINT[]))", ("{3,1,2}",))
    assert POSTGRESQL.in_values("path", ["a", "b"]) == ("path = ANY(?)", (["a", "b"],))
    assert POSTGRESQL.in_values("flag", [True, 1]) == ("flag = ANY(?)", ([True, 1],))
    assert POSTGRESQL.in_values("id", []) == ("id = ANY(?)", ([],))
    assert SQLITE.in_values("id", [3, 1]) == ("id IN (?, ?)", (3, 1))

"""A user message keeps the dynamic context it was first sent with, so later requests
repeat it unchanged (the model server's KV cache keeps serving that prefix) and add only
what no earlier block showed."""

from __future__ import annotations

from typing import Any

STATEMENTS = [
    # NULL: never sent to the model; '': sent with no new context lines.
    "ALTER TABLE messages ADD COLUMN context TEXT",
]


def apply(conn: Any) -> None:
    for statement in STATEMENTS:
        conn.execute(statement)


def apply_postgresql(conn: Any) -> None:
    for statement in STATEMENTS:  # the same statement: plain SQL both engines speak
        conn.execute(statement)

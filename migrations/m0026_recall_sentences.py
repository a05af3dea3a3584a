"""The vectors of each recalled message's sentences: `message_recall.sentence_vectors`.

A message of two or more sentences (or a sentence and a shared photo) is re-scored by its
best one (`memory.sentences`); their vectors are made when the recall index takes the
message in and kept here, packed in one value: float16 unit vectors, one after another
(an empty value: the message needs none; NULL: not made yet, e.g. a message indexed
before this migration, which ranks by its whole text until the background fill reaches
it). A column of the row it belongs to, so every path that deletes or copies the row
(forget, forget-me, `recall_store.clear`, `mnemo storage migrate`) covers it as well.

One SQL text for both engines; only the byte type differs.
"""

from __future__ import annotations

from typing import Any

COLUMN = "ALTER TABLE message_recall ADD COLUMN sentence_vectors {blob}"


def apply(conn: Any) -> None:
    conn.execute(COLUMN.format(blob="BLOB"))


def apply_postgresql(conn: Any) -> None:
    conn.execute(COLUMN.format(blob="BYTEA"))

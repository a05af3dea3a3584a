"""Each connection's keyword lists per chat, kept current from the `memory_changes` log.

The first query of a chat builds its `KeywordLists` from `memories`; later queries read the
log (triggers of migration m0006, whichever process or connection wrote it) from where the
lists were last brought up to date and re-read only the memories that changed. So a query
after a change costs a small recent-segment rebuild, not a new index. `bm25_ids` and
`jaccard_ids` are what `rank_memories` calls.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.db import Connection, transaction
from memory.keywords import KeywordLists, query_terms
from memory.store import ACTIVE_SQL

CACHE_MEMORIES = 200_000  # memories kept in posting lists per connection, across chats
LOG_PRUNE_AT = 100_000  # the change log is pruned once it holds this many rows ...
LOG_KEEP = 50_000  # ... down to the newest this many
PRUNED_SCOPE = -1  # a log row of this scope: the log was pruned through seq `memory_id`
GLOBAL_SCOPE = 0  # the log's scope of global memories (`chat_id IS NULL`)


@dataclass(frozen=True)
class Marks:
    """The last log entries a chat's lists include: of the chat's scope and the global one."""

    chat: int
    shared: int


@dataclass(frozen=True)
class Changes:
    marks: Marks
    memory_ids: frozenset[int]
    pruned_through: int  # 0 unless the log lost entries the lists may not have seen


def load_rows(
    conn: Connection, chat_id: int | None, memory_ids: Sequence[int] | None = None
) -> list[tuple[int, str, str]]:
    """The active memories a chat's queries rank (its own and global ones), or those of them
    among `memory_ids`."""
    sql = (
        "SELECT id, content, context FROM memories WHERE (chat_id IS ? OR chat_id IS NULL)"
        f" AND {ACTIVE_SQL}"
    )
    if memory_ids is None:
        return _texts(conn.execute(sql + " ORDER BY id", (chat_id,)))
    found: list[tuple[int, str, str]] = []
    for start in range(0, len(memory_ids), 900):
        batch = tuple(memory_ids[start : start + 900])
        marks = ", ".join("?" * len(batch))
        found += _texts(conn.execute(f"{sql} AND id IN ({marks}) ORDER BY id", (chat_id, *batch)))
    return found


def _texts(rows: Iterable[Any]) -> list[tuple[int, str, str]]:
    return [(int(row[0]), str(row[1]), str(row[2] or "")) for row in rows]


def log_end(conn: Connection) -> int:
    """The newest log entry's seq (0 for an empty log)."""
    return int(conn.execute("SELECT coalesce(max(seq), 0) FROM memory_changes").fetchone()[0])


def changes_since(conn: Connection, chat_id: int | None, marks: Marks) -> Changes | None:
    """What changed in the chat's and the global scope after `marks`; None when nothing did."""
    scope = GLOBAL_SCOPE if chat_id is None else chat_id
    oldest = min(marks.chat, marks.shared)
    rows = conn.execute(
        "SELECT seq, scope, memory_id FROM memory_changes"
        " WHERE (scope = ? AND seq > ?) OR (scope = ? AND seq > ?) OR (scope = ? AND seq > ?)",
        (
            scope,
            marks.chat,
            GLOBAL_SCOPE,
            marks.shared,
            PRUNED_SCOPE,
            min(marks.chat, marks.shared),
        ),
    ).fetchall()
    if not rows:
        return None
    chat_mark, shared_mark, pruned, ids = marks.chat, marks.shared, 0, set()
    for seq, row_scope, memory_id in rows:
        if row_scope == PRUNED_SCOPE:
            if int(memory_id) > oldest:
                pruned = max(pruned, int(memory_id))
            continue
        ids.add(int(memory_id))
        if row_scope == scope:
            chat_mark = max(chat_mark, int(seq))
        if row_scope == GLOBAL_SCOPE:
            shared_mark = max(shared_mark, int(seq))
    return Changes(Marks(chat_mark, shared_mark), frozenset(ids), pruned)


def prune_log(conn: Connection) -> int:
    """Drop the oldest change-log rows once there are LOG_PRUNE_AT; return how many went.

    A marker row records how far the log was pruned, so lists older than that are rebuilt.
    """
    total = int(conn.execute("SELECT count(*) FROM memory_changes").fetchone()[0])
    if total < LOG_PRUNE_AT:
        return 0
    cutoff = int(
        conn.execute(
            "SELECT seq FROM memory_changes ORDER BY seq DESC LIMIT 1 OFFSET ?", (LOG_KEEP,)
        ).fetchone()[0]
    )
    with transaction(conn):
        gone = conn.execute("DELETE FROM memory_changes WHERE seq <= ?", (cutoff,)).rowcount
        conn.execute(
            "INSERT INTO memory_changes (scope, memory_id) VALUES (?, ?)", (PRUNED_SCOPE, cutoff)
        )
    return int(gone)


class _Cache:
    """Per-connection LRU of chats' lists, bounded by the memories they hold in total."""

    def __init__(self) -> None:
        self.entries: OrderedDict[int | None, tuple[Marks, KeywordLists]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, chat_id: int | None) -> tuple[Marks, KeywordLists] | None:
        with self.lock:
            entry = self.entries.get(chat_id)
            if entry is not None:
                self.entries.move_to_end(chat_id)
            return entry

    def put(self, chat_id: int | None, marks: Marks, lists: KeywordLists) -> None:
        with self.lock:
            self.entries[chat_id] = (marks, lists)
            self.entries.move_to_end(chat_id)
            held = sum(len(item) for _, item in self.entries.values())
            while held > CACHE_MEMORIES and len(self.entries) > 1:
                _, (_, dropped) = self.entries.popitem(last=False)
                held -= len(dropped)


_caches: weakref.WeakKeyDictionary[Connection, _Cache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def keyword_lists(conn: Connection, chat_id: int | None) -> KeywordLists:
    """The chat's posting lists, brought up to date with the change log.

    Log positions are read before the rows they cover, so a change that lands in between is
    applied again next time (applying a change is idempotent), never missed. Inside an open
    transaction the result is not kept: it may hold writes that are rolled back later.
    """
    with _caches_lock:
        cache = _caches.setdefault(conn, _Cache())
    entry = cache.get(chat_id)
    changes = changes_since(conn, chat_id, entry[0]) if entry is not None else None
    if entry is not None and changes is None:
        return entry[1]
    previous = entry[1] if entry is not None else None
    if previous is None or changes is None or changes.pruned_through:
        end = log_end(conn)
        marks, lists = Marks(end, end), KeywordLists.build(load_rows(conn, chat_id), previous)
    else:
        ids = sorted(changes.memory_ids)
        rows = load_rows(conn, chat_id, ids)
        kept = {row[0] for row in rows}
        marks = changes.marks
        lists = previous.apply(rows, [memory_id for memory_id in ids if memory_id not in kept])
    if not conn.in_transaction:
        cache.put(chat_id, marks, lists)
    return lists


def bm25_ids(
    conn: Connection, chat_id: int | None, query: str, depth: int
) -> list[tuple[int, float]]:
    """(id, BM25 score) of the chat's and global memories matching a query word, best first."""
    terms = query_terms(query)
    if not terms:
        return []
    return keyword_lists(conn, chat_id).score(terms, depth)


def jaccard_ids(conn: Connection, chat_id: int | None, query: str) -> list[tuple[int, float]]:
    """(id, Jaccard of content-stem sets) of every candidate sharing a stem, best first."""
    terms = query_terms(query)
    if not terms:
        return []
    return keyword_lists(conn, chat_id).jaccard(terms)

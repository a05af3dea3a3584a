"""The memory package's storage interface: structured memories and what ranking reads.

`MemoryStore` is the one door; `memory.memory_store.DatabaseMemoryStore` is its one
implementation (its indexes in `memory.memory_index`). Records and input checks are
here, shared by every implementation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, Required, TypedDict, Unpack

from core.errors import InputError
from core.text import whole_number

if TYPE_CHECKING:
    from memory.embeddings import Embedder

CATEGORIES = ("PROFILE", "KNOWLEDGE", "EVENT")
MAX_CONTENT_CHARS = 2000
MAX_MEMORY_ID = 2**63 - 1  # SQLite's largest INTEGER: a larger id names no memory
MAX_ID_DIGITS_READ = 100  # longer ids are read (to say they are out of range), not parsed
MAX_NAME_CHARS = 40
GLOBAL_SCOPE = 0  # the scope number of global memories (`chat_id` NULL) in indexes and logs
PRUNED_SCOPE = -1  # a log row of this scope: the log was pruned through seq `memory_id`

# Aliases: inside the store classes the name `list` is the method that lists memories.
Vector = list[float]
Memories = list["Memory"]
RankTexts = list["RankText"]
Tombstones = list["Tombstone"]
Ids = list[int]
Scored = list[tuple[int, float]]
RankingRows = list[tuple[int, str, str]]
VectorRows = list[tuple[int, bytes]]


class MemoryFields(TypedDict, total=False):
    """What a new memory is given besides its chat, text and category (`source` always)."""

    source: Required[str]  # what wrote it: "reflector", "remember", "bench", ...
    confidence: float  # 0.7 when not given
    expires_at: str | None
    embedding: Vector | None  # made by the store's embedder when not given
    context: str  # text around it that helps find it; never injected
    sender_id: str  # who asked for it in a group
    sender_name: str


@dataclass(frozen=True)
class NewMemory:
    """One memory of a batch for `MemoryStore.add_many` (the arguments of `add`)."""

    chat_id: int | None
    content: str
    category: str
    source: str
    confidence: float = 0.7
    expires_at: str | None = None
    embedding: Vector | None = None
    context: str = ""
    sender_id: str = ""
    sender_name: str = ""


class DuplicateTest(TypedDict, total=False):
    """How `MemoryStore.find_near_duplicate` compares: by cosine distance of the vectors
    (`embedding`: the new text's, made when not given) or by Jaccard of the words."""

    embedding: Vector | None
    max_cosine_distance: float  # 0.15 when not given
    min_jaccard: float  # 0.5 when not given
    method: str  # "auto" (cosine when vectors exist), "jaccard" or "cosine"


@dataclass(frozen=True)
class Memory:
    id: int
    chat_id: int | None
    content: str
    category: str
    confidence: float
    source: str
    created_at: str
    updated_at: str
    last_seen_at: str
    archived: bool
    expires_at: str | None
    embedding_model: str | None
    context: str = ""  # text around the memory that helps find it; never injected
    sender_id: str = ""  # who said `remember:` in a group ('' otherwise)
    sender_name: str = ""

    def line(self) -> str:
        """The form injected into the context: `[CATEGORY] text`, or in a group
        `[CATEGORY] [Ann] text` when Ann asked for it to be remembered."""
        name = display_name(self.sender_name)
        return (
            f"[{self.category}] [{name}] {self.content}"
            if name
            else f"[{self.category}] {self.content}"
        )


@dataclass(frozen=True)
class Tombstone:
    """A memory a person forgot: its text, whose "I" it was written with, who forgot it."""

    id: int
    chat_id: int | None
    memory_id: int
    content: str
    speaker: str
    forgotten_by: str
    forgotten_at: str


@dataclass(frozen=True)
class RankText:
    """What ranking's second stage reads of a candidate (`MemoryStore.rank_texts`): a
    `Memory` has these fields too. Fewer columns than `Memory`, and no object of 15 fields
    for each of the ~140 candidates of a query, most of which miss the final cut."""

    id: int
    chat_id: int | None
    content: str
    created_at: str


@dataclass(frozen=True)
class NoteChange:
    """One change of an AGENTS.md note file, or a refused attempt: who caused it (the
    sender, the platform's message id and the stored message's), from which chat, what."""

    chat_id: int | None  # the chat it came from: for a chat's own notes, that chat
    scope: str  # global, channel or chat
    action: str  # replace, append, clear or refused
    via: str  # tool or dashboard
    sender_id: str = ""
    sender_name: str = ""
    message_id: str = ""  # the platform's id of the message that asked
    user_message_id: int = 0  # the stored message's row id (0: none)
    chars_after: int = 0  # the file's length after the change
    excerpt: str = ""  # the start of what was written ('' for a refusal)
    reason: str = ""  # why it was refused
    id: int = 0
    changed_at: str = ""


@dataclass(frozen=True)
class Marks:
    """The last change-log entries a chat's keyword lists include: its scope and global."""

    chat: int
    shared: int


@dataclass(frozen=True)
class Changes:
    """What changed in a chat's and the global scope after some `Marks`."""

    marks: Marks
    memory_ids: frozenset[int]
    pruned_through: int  # 0 unless the log lost entries the lists may not have seen


@dataclass(frozen=True)
class RankSnapshot:
    """A saved blob of a chat's ranking data (`memory.rank_snapshots`) and what it is
    current to."""

    marks: Marks
    model: str  # a vector snapshot's embedding model and dimension; '' for keywords
    data: bytes


def memory_from_row(row: Sequence[Any]) -> Memory:
    """A `Memory` from a row of the columns in table order (both engines select them so).

    Its attributes are set in one step rather than through the frozen dataclass's
    `__init__` (one `object.__setattr__` per field): a ranking reads ~150 rows, and this
    takes 1.1 us a row where `__init__` took 2.7 (the same object either way: `Memory` has
    no `__post_init__`; tests/memory/test_rank_speed.py checks every field is set).
    """
    memory = object.__new__(Memory)
    memory.__dict__.update(
        {
            "id": row[0], "chat_id": row[1], "content": row[2], "category": row[3],
            "confidence": float(row[4]), "source": row[5] or "", "created_at": row[6],
            "updated_at": row[7], "last_seen_at": row[8], "archived": bool(row[9]),
            "expires_at": row[10], "embedding_model": row[11], "context": row[12] or "",
            "sender_id": row[13] or "", "sender_name": row[14] or "",
        }
    )  # fmt: skip
    return memory


def display_name(name: str) -> str:
    """A sender's name as a memory line shows it: one line, no brackets or tags, short."""
    text = " ".join(re.sub(r"[\[\]<>]", " ", name).split())
    return text[:MAX_NAME_CHARS]


def parse_memory_id(text: str) -> int:
    """The memory id in `text` ("12" or "#12"); `InputError` saying what is wrong else."""
    value = whole_number(text.strip().removeprefix("#"), max_digits=MAX_ID_DIGITS_READ)
    if value is None:
        raise InputError(f"{text.strip()!r} is not a memory id: give the #number /memory shows")
    return check_memory_id(value)


def check_memory_id(memory_id: int) -> int:
    if not 0 < memory_id <= MAX_MEMORY_ID:
        raise InputError(
            f"{memory_id} is not a memory id: ids are whole numbers from 1 to {MAX_MEMORY_ID:,}"
        )
    return memory_id


def scope_of(chat_id: int | None) -> int:
    return GLOBAL_SCOPE if chat_id is None else chat_id


def clean_content(content: str) -> str:
    text = " ".join(str(content).split())
    if not text:
        raise InputError("memory content is empty")
    if len(text) > MAX_CONTENT_CHARS:
        raise InputError(f"memory content is {len(text)} chars; the limit is {MAX_CONTENT_CHARS}")
    return text


def clean_category(category: str) -> str:
    value = str(category).strip().upper()
    if value not in CATEGORIES:
        raise InputError(f"category must be one of {', '.join(CATEGORIES)}, not {category!r}")
    return value


def clean_expiry(expires_at: str | None) -> str | None:
    """An ISO 8601 date or time, normalised to UTC `YYYY-MM-DDTHH:MM:SS.fffZ`."""
    if expires_at is None or not str(expires_at).strip():
        return None
    try:
        moment = datetime.fromisoformat(str(expires_at).strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise InputError(f"expires_at {expires_at!r} is not an ISO 8601 date") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def check_confidence(confidence: float) -> float:
    if not 0.0 <= float(confidence) <= 1.0:
        raise InputError(f"confidence must be within 0..1, not {confidence}")
    return float(confidence)


class MemoryStore(Protocol):
    """Every read and write of structured memories and of their derived indexes."""

    embedder: Embedder | None

    def transaction(self) -> AbstractContextManager[Any]: ...

    def with_embedder(self, embedder: Embedder | None) -> MemoryStore:
        """The same store (same connection and caches) embedding with `embedder`."""
        ...

    @property
    def vectors_enabled(self) -> bool:
        """Whether new memories get a vector (vectors are supported and an embedder is set)."""
        ...

    def prepare_vectors(self) -> bool:
        """Make the vector index fit the embedder (a change of model rebuilds it); True when
        it was (re)created."""
        ...

    def vectors_unavailable(self) -> str | None:
        """Why KNN cannot run now (no vector support, no embedder, an index of another
        model), or None when it can."""
        ...

    # -- writes
    def add(
        self, chat_id: int | None, content: str, category: str, **fields: Unpack[MemoryFields]
    ) -> int:
        """Store a memory; its id (`MemoryFields`: its source and what else it may have)."""
        ...

    def add_many(self, items: Sequence[NewMemory]) -> Ids:
        """Store many memories in one transaction (an import, a bench's fill); their ids in
        order. Their rows go in one batch and their vectors in one write (PostgreSQL: a few
        round trips for the whole batch instead of several per memory)."""
        ...

    def update(self, memory_id: int, content: str, embedding: Vector | None = None) -> None: ...

    def touch(self, memory_id: int, confidence: float | None = None) -> None: ...

    def archive(self, memory_id: int) -> None: ...

    def delete(self, memory_id: int) -> None:
        """Remove a memory without a trace (upkeep: expired memories)."""
        ...

    def forget(self, memory_id: int, *, forgotten_by: str, speaker: str = "") -> None:
        """Delete a memory a person asked to forget, leaving a tombstone in the same
        transaction; `speaker` is whose "I" the text uses (for `memory.forgetting`). Outside
        a transaction, the engine's leftover copies of it are scrubbed too (SQLite: the WAL
        is checkpointed; PostgreSQL: `memories` is vacuumed); the tombstone keeps its text."""
        ...

    def tombstones(self, chat_id: int | None) -> Tombstones:
        """The tombstones of exactly this scope, oldest first."""
        ...

    def lift_tombstones(self, tombstone_ids: Sequence[int]) -> None:
        """Drop tombstones: the person asked to remember the fact again."""
        ...

    def record_note_change(self, change: NoteChange) -> None:
        """Log one change of an AGENTS.md file (or a refused attempt)."""
        ...

    def note_changes(self, chat_id: int, limit: int) -> list[NoteChange]:
        """The newest `limit` note changes made from the chat, newest first."""
        ...

    def supersede(self, old_id: int, new_id: int) -> None:
        """Archive `old_id` and record that `new_id` replaced it."""
        ...

    def forget_chat(self, chat_id: int) -> int:
        """Delete every memory of the chat, archived ones too, with their index rows,
        vectors, supersede links and change-log entries; return how many memories went."""
        ...

    # -- reads
    def get(self, memory_id: int) -> Memory | None: ...

    def list(
        self, chat_id: int | None, *, include_global: bool = True, include_archived: bool = False
    ) -> Memories: ...

    def by_ids(self, ids: Sequence[int]) -> dict[int, Memory]: ...

    def rank_texts(self, ids: Sequence[int]) -> dict[int, RankText]:
        """The chat, text and day stored of the memories among `ids`, in the order asked."""
        ...

    def rank_texts_around(
        self, chat_id: int, ids: Sequence[int], seeds: Sequence[int]
    ) -> tuple[dict[int, RankText], dict[int, RankTexts]]:
        """`rank_texts(ids)` and the `RankText`s of `adjacent_many(chat_id, seeds)`, in one read."""
        ...

    def count_active(self, chat_id: int | None = None, *, with_global: bool = False) -> int:
        """Active memories (of every scope when `chat_id` is None and not `with_global`)."""
        ...

    def newest(self, chat_id: int, limit: int) -> Memories:
        """The chat's own active memories, newest first."""
        ...

    def adjacent(self, chat_id: int, memory_id: int) -> Memories:
        """The chat's own unarchived memories stored just before and just after
        `memory_id` (ranking's neighbour step), oldest first."""
        ...

    def adjacent_many(self, chat_id: int, memory_ids: Sequence[int]) -> dict[int, Memories]:
        """`adjacent` of several memories in one read: id -> its neighbours (none: absent)."""
        ...

    def matching(self, chat_id: int, text: str, limit: int) -> Memories:
        """The chat's own active memories sharing words with `text`, best match first."""
        ...

    def find_near_duplicate(
        self, chat_id: int | None, content: str, **test: Unpack[DuplicateTest]
    ) -> Memory | None:
        """An active memory of exactly this scope saying nearly the same thing, if any."""
        ...

    # -- what ranking reads
    def ranking_rows(
        self, chat_id: int | None, memory_ids: Sequence[int] | None = None
    ) -> RankingRows:
        """(id, content, context) of the chat's and global active memories (or those listed)."""
        ...

    def vector_rows(
        self, chat_id: int | None, memory_ids: Sequence[int] | None = None
    ) -> VectorRows:
        """(id, float32 bytes) of the chat's and global active memories that have a vector of
        the current model (or those of them listed)."""
        ...

    @property
    def cache_key(self) -> object:
        """What in-process caches of this store's derived data are kept per (its connection)."""
        ...

    def in_transaction(self) -> bool: ...

    def change_log_end(self) -> int: ...

    def changes_since(self, chat_id: int | None, marks: Marks) -> Changes | None: ...

    def prune_change_log(self) -> int: ...

    def rank_snapshot(self, chat_id: int | None, kind: str) -> RankSnapshot | None:
        """The chat's saved ranking data of `kind` (`memory.rank_snapshots`), if any."""
        ...

    def rank_snapshot_marks(self, chat_id: int | None, kind: str) -> Marks | None:
        """The marks of the saved snapshot, without its blob."""
        ...

    def background_reads(self) -> bool:
        """Whether `rank_snapshot_later` reads on another connection (PostgreSQL, outside a
        transaction) rather than here and now."""
        ...

    def rank_snapshot_later(self, chat_id: int | None, kind: str) -> Future[RankSnapshot | None]:
        """`rank_snapshot`, read on another connection while the caller goes on where
        `background_reads`, else read now (a future already done)."""
        ...

    def save_rank_snapshot(
        self, chat_id: int | None, kind: str, snapshot: RankSnapshot
    ) -> None: ...

    def drop_rank_snapshots(self, chat_id: int | None, *, every_chat: bool = False) -> int:
        """Drop the chat's saved ranking data (`every_chat`: every chat's, as a global
        memory is in each); how many snapshots went."""
        ...

    # -- upkeep
    def stale_ids(self, confidence_floor: float, days: int, limit: int) -> Ids: ...

    def expired_ids(self, limit: int) -> Ids: ...

    def has_unembedded(self) -> bool: ...

    def embed_missing(
        self, limit: int = 500, progress: Callable[[int], None] | None = None
    ) -> int: ...

    def count_missing_vectors(self) -> int: ...

    def reindex(self, progress: Callable[[int], None] | None = None) -> int: ...


def changes_from_log(
    rows: Sequence[tuple[Any, Any, Any]], scope: int, marks: Marks
) -> Changes | None:
    """The change-log rows (seq, scope, memory id) after `marks` folded into `Changes` for the
    chat scope `scope` (both engines' stores read the same log). A PRUNED_SCOPE row says the
    log was pruned through its memory-id column's seq."""
    if not rows:
        return None
    oldest = min(marks.chat, marks.shared)
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

"""FactWriter: stores gated facts for one chat, refreshing near-duplicates and superseding.

Runs inside the pass's commit transaction; embeddings are computed beforehand, off the
event loop, and passed in. The reflector never hard-deletes here: a superseded memory is
archived and linked to its successor in `memory_supersede_edges`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from memory.forgetting import repeated_tombstone
from memory.store import Memory, MemoryStore
from memory.terms import content_terms, tokens

logger = logging.getLogger(__name__)

SOURCE = "reflector"
NEW_CONFIDENCE = 0.7
REFRESH_BOOST = 0.1


@dataclass(frozen=True)
class PreparedFact:
    """A fact that passed the gate, with its embedding when vectors are on."""

    content: str
    category: str
    supersedes_id: int | None = None
    embedding: list[float] | None = None


@dataclass
class FactTally:
    added: int = 0
    updated: int = 0
    refreshed: int = 0
    skipped: int = 0


class FactWriter:
    """Applies one pass's facts to a chat's memories."""

    def __init__(self, memories: MemoryStore) -> None:
        self.memories = memories

    def write(self, chat_id: int, facts: list[PreparedFact]) -> FactTally:
        """Store the facts; one that repeats a memory forgotten since the pass began (by
        words: the pass compared the older tombstones by embedding too) is skipped."""
        tally = FactTally()
        tombstones = self.memories.tombstones(chat_id)
        for fact in facts:
            if repeated_tombstone(fact.content, tombstones) is not None:
                tally.skipped += 1
                continue
            self._write_one(chat_id, fact, tally)
        return tally

    def _write_one(self, chat_id: int, fact: PreparedFact, tally: FactTally) -> None:
        old = self._supersedable(chat_id, fact.supersedes_id)
        duplicate = self.memories.find_near_duplicate(
            chat_id, fact.content, embedding=fact.embedding
        )
        if duplicate is not None and old is not None and duplicate.id == old.id:
            # The model says this changes `old`; a near-duplicate of it is still a change
            # (Berlin → Munich shares most words) unless the wording is the same.
            duplicate = duplicate if tokens(duplicate.content) == tokens(fact.content) else None
        if duplicate is not None and not self.memories.vectors_enabled:
            # Keyword-only, "colour is blue" and "colour is green" share most words: a fact
            # with a content word the match lacks says something new, so it is kept.
            new_words = set(content_terms(fact.content)) - set(content_terms(duplicate.content))
            duplicate = None if new_words else duplicate
        if duplicate is not None:
            self._refresh(duplicate)
            tally.refreshed += 1
            if old is not None and old.id != duplicate.id:
                self._supersede(old, duplicate.id)
                tally.updated += 1
            return
        new_id = self.memories.add(
            chat_id,
            fact.content,
            fact.category,
            source=SOURCE,
            confidence=NEW_CONFIDENCE,
            embedding=fact.embedding,
        )
        if old is not None:
            self._supersede(old, new_id)
            tally.updated += 1
        else:
            tally.added += 1

    def _supersedable(self, chat_id: int, memory_id: int | None) -> Memory | None:
        """The memory a fact may replace: an active one of this very chat, else None."""
        if memory_id is None:
            return None
        memory = self.memories.get(memory_id)
        if memory is None or memory.chat_id != chat_id or memory.archived:
            logger.info(
                "chat %s: ignoring supersedes_id %s (not an active memory of the chat)",
                chat_id,
                memory_id,
            )
            return None
        return memory

    def _refresh(self, memory: Memory) -> None:
        self.memories.touch(memory.id, confidence=min(1.0, memory.confidence + REFRESH_BOOST))

    def _supersede(self, old: Memory, new_id: int) -> None:
        self.memories.supersede(old.id, new_id)

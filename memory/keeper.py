"""MemoryKeeper: what the memory package offers a chat, over file memory, the store and ranking.

The embedding model is loaded by `load_embedder()`, explicitly (the extension's `start`,
a CLI command): reading the keeper never loads a model or embeds anything. Once a model is
loaded, memories still lacking a vector of it are embedded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from core.api import Chat, TurnContext
from core.config import Config
from core.errors import ToolError
from memory.embeddings import Embedder, load_embedder
from memory.explicit import DUPLICATE_JACCARD, EXPLICIT_CONFIDENCE, guess_category
from memory.files import FileMemory
from memory.forgetting import repeated_tombstone, repeats_by_words, texts_to_embed
from memory.quality import INSTRUCTION, SECRET, check_fact
from memory.retrieval import RankedMemory, effective_mode, rank_memories
from memory.store import Memory, MemoryStore, Tombstone, Vector, display_name

logger = logging.getLogger(__name__)

EmbedderFactory = Callable[[], Embedder | None]

USAGE = "Usage: /forget ID (the #number shown by /memory)"


def refusal_text(reason: str) -> str:
    """Why the gate refused a fact and what to do instead, for the person who asked."""
    if reason.startswith(SECRET):
        return f"{reason.partition(': ')[2]}; Mnemo does not keep secrets"
    if reason == INSTRUCTION:
        return (
            "it reads like an instruction to the assistant, not a fact; state it as a fact"
            " about someone (e.g. 'prefers short answers')"
        )
    hints = {
        "too short": "say a little more",
        "too long": "split it into shorter facts",
        "hedged": "state it without 'maybe' or 'I think'",
        "small talk": "greetings and thanks are not remembered",
    }
    hint = next((text for start, text in hints.items() if reason.startswith(start)), "")
    return f"{reason}; {hint}" if hint else reason


class FactRefused(ToolError):
    """The quality gate (or a tombstone) refused a fact: `why` says why and what to do."""

    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"not stored: {why}")


def gated(fact: str) -> str:
    """`fact` as the quality gate (the reflector's) normalises it; `FactRefused` saying
    why when the gate refuses it."""
    verdict = check_fact(fact)
    if not verdict.accepted:
        raise FactRefused(refusal_text(verdict.reason))
    return verdict.content


GROUP_KINDS = ("group", "channel", "thread")


@dataclass(frozen=True)
class Access:
    """Who is asking: the chat, whether it may edit global memory, and in a group the
    sender and whether they administer it."""

    chat: Chat
    control: bool
    sender_id: str = ""
    sender_name: str = ""
    group: bool = False
    admin: bool = False

    @property
    def who(self) -> str:
        """How a tombstone names the person: `Ann (telegram:42)`."""
        name = display_name(self.sender_name) or "someone"
        return f"{name} ({self.chat.channel}:{self.sender_id})" if self.sender_id else name


def access_of(config: Config, turn: TurnContext) -> Access:
    """The access of the sender of `turn`. A group admin is one the platform says is
    (`Inbound.sender_is_admin`), anyone in a control chat, or the operator: a sender
    whose own private chat (`channel:sender_id`) is a control chat."""
    inbound = turn.inbound
    group = inbound.chat_kind in GROUP_KINDS
    operator = bool(inbound.sender_id) and (
        f"{inbound.channel}:{inbound.sender_id}" in config.agent.control_chats
    )
    admin = inbound.sender_is_admin or turn.is_control_chat or operator
    return Access(turn.chat, turn.is_control_chat, inbound.sender_id, inbound.sender_name,
                  group, admin)  # fmt: skip


class MemoryKeeper:
    def __init__(
        self,
        config: Config,
        store: MemoryStore,
        embedder_factory: EmbedderFactory | None = None,
        files: FileMemory | None = None,
    ) -> None:
        self.config = config
        self.files = files or FileMemory(config.storage.data_dir)
        self._factory = embedder_factory or (
            lambda: load_embedder(config.memory.embedding_model, config.memory.query_precision)
        )
        self._loaded = False
        self.store = store

    @property
    def embedder(self) -> Embedder | None:
        """The embedding model if it is loaded (None before `load_embedder()` or if it failed)."""
        return self.store.embedder

    @property
    def loaded(self) -> bool:
        return self._loaded

    async def load_embedder(self) -> Embedder | None:
        """Load the embedding model off the event loop (once); embed memories lacking a vector.

        Only the load runs in a thread; database work stays on the caller's thread, so
        the shared connection is never used from two threads at once.
        """
        if not self._loaded:
            embedder = await asyncio.to_thread(self._factory)
            self._install(embedder)
        return self.store.embedder

    def load_embedder_now(self) -> Embedder | None:
        """`load_embedder()` for synchronous callers (CLI commands)."""
        if not self._loaded:
            self._install(self._factory())
        return self.store.embedder

    def _install(self, embedder: Embedder | None) -> None:
        if self._loaded:
            return
        self._loaded = True
        self.store = self.store.with_embedder(embedder)
        if embedder is not None and self.store.vectors_enabled:
            self.store.prepare_vectors()
            done = self.store.embed_missing(limit=1_000_000)
            if done:
                logger.info("embedded %d memories that had no vector", done)

    def mode(self) -> str:
        """The ranking mode that really runs (the configured one, or bm25 as fallback)."""
        return effective_mode(self.store, self.config.memory.retriever)

    def rank(self, chat_id: int | None, query: str, k: int) -> list[RankedMemory]:
        return rank_memories(self.store, chat_id, query, k, mode=self.config.memory.retriever)

    def access(self, turn: TurnContext) -> Access:
        return access_of(self.config, turn)

    def owned(self, access: Access, memory_id: int, *, deleting: bool = False) -> Memory:
        """The memory if this sender may change (or with `deleting`, forget) it; otherwise
        a ToolError that reveals nothing of other chats.

        In a group, a memory someone asked for is theirs: only they or a group admin may
        change or forget it. One the reflector learned has no author: anyone may correct
        it, only an admin may forget it."""
        memory = self.store.get(memory_id)
        if memory is None or memory.archived:
            raise ToolError(f"no memory #{memory_id} in this chat")
        if memory.chat_id is None:
            if access.control:
                return memory
            raise ToolError(f"memory #{memory_id} is global; only a control chat may change it")
        if memory.chat_id != access.chat.id:
            raise ToolError(f"no memory #{memory_id} in this chat")
        mine = bool(access.sender_id) and memory.sender_id == access.sender_id
        if not access.group or access.admin or mine:
            return memory
        if memory.sender_id:
            author = display_name(memory.sender_name) or "the member who asked for it"
            raise ToolError(
                f"only {author} (who asked me to remember #{memory_id}) or a group admin"
                " may change or forget it"
            )
        if deleting:
            raise ToolError(
                f"only a group admin may forget #{memory_id}: I learned it from the"
                " conversation, so no one member owns it"
            )
        return memory

    def checked(self, fact: str) -> str:
        return gated(fact)

    def checked_not_forgotten(self, chat_id: int, fact: str) -> str:
        """`checked(fact)`, also refused when it repeats a memory someone forgot here, by
        words, distinctive terms or (with the model loaded) meaning: the memory tools, so
        the model does not bring back what a person took away."""
        fact = self.checked(fact)
        tombstones = self.store.tombstones(chat_id)
        tombstone = repeated_tombstone(fact, tombstones, self._vectors(fact, tombstones))
        if tombstone is not None:
            raise FactRefused(
                f"it repeats memory #{tombstone.memory_id}, which {tombstone.forgotten_by}"
                f" asked me to forget on {tombstone.forgotten_at[:10]}; only the person's own"
                " `remember:` stores it again"
            )
        return fact

    def _vectors(self, fact: str, tombstones: list[Tombstone]) -> dict[str, Vector] | None:
        """The embeddings `repeated_tombstone` compares by meaning, when the model is
        loaded (a few short texts: embedded here, as `store.add` embeds the fact)."""
        embedder = self.store.embedder
        if embedder is None or not tombstones:
            return None
        texts = texts_to_embed([fact], tombstones)
        return dict(zip(texts, embedder.embed(texts), strict=True))

    def forget(self, access: Access, memory_id: int) -> Memory:
        """Forget a memory this sender may forget, leaving a tombstone so the reflector
        does not learn it again. Whose "I" the text uses: its sender's in a group, the
        chat's person in a private chat."""
        memory = self.owned(access, memory_id, deleting=True)
        speaker = memory.sender_name or ("" if access.group else access.sender_name)
        self.store.forget(memory.id, forgotten_by=access.who, speaker=speaker)
        return memory

    def remember(self, access: Access, fact: str) -> tuple[int, bool]:
        """Store an explicit fact that passes the gate, updating a near-duplicate (in a
        group, one of the same sender); return (id, was_update). A refused fact raises
        `FactRefused` and nothing is stored. Asking again lifts a tombstone of the fact."""
        fact = self.checked(fact)
        chat_id = access.chat.id
        sender = (access.sender_id, access.sender_name) if access.group else ("", "")
        lifted = [t.id for t in self.store.tombstones(chat_id) if repeats_by_words(fact, t)]
        with self.store.transaction():
            self.store.lift_tombstones(lifted)
            existing = self.store.find_near_duplicate(
                chat_id, fact, min_jaccard=DUPLICATE_JACCARD, method="jaccard"
            )
            if existing is not None and existing.sender_id == sender[0]:
                self.store.update(existing.id, fact)
                self.store.touch(existing.id, max(existing.confidence, EXPLICIT_CONFIDENCE))
                return existing.id, True
            memory_id = self.store.add(
                chat_id,
                fact,
                guess_category(fact),
                source="explicit",
                confidence=EXPLICIT_CONFIDENCE,
                sender_id=sender[0],
                sender_name=sender[1],
            )
        return memory_id, False

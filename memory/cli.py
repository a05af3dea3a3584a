"""`mnemo memory list|search|add|forget|forgotten|prepare|reindex`.

Imports are light at module level (click only) so `mnemo --help` stays fast; the model
and the database are opened inside the commands.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from core.storage.store import SessionStore
    from memory.keeper import MemoryKeeper

CHAT_HELP = "The chat: channel:chat_id (e.g. terminal:local, telegram:-100123) or its number."


@contextmanager
def open_keeper(load_model: bool = True) -> Iterator[tuple[MemoryKeeper, SessionStore]]:
    """The memory keeper (its model loaded, unless not needed) and the session store, on
    the engine `[storage] url` names."""
    from core.cli.runtime import current_config
    from core.storage.engine import open_storage
    from core.storage.stores import session_store
    from memory.keeper import MemoryKeeper
    from memory.stores import file_memory, memory_store

    config = current_config()
    storage = open_storage(config.storage)
    try:
        keeper = MemoryKeeper(
            config,
            memory_store(storage),
            None if load_model else (lambda: None),
            file_memory(storage, config.storage.data_dir),
        )
        keeper.load_embedder_now()
        yield keeper, session_store(storage)
    finally:
        storage.close()


def chat_option(function: click.decorators.FC) -> click.decorators.FC:
    function = click.option("--global", "global_", is_flag=True, help="Global memories (no chat).")(
        function
    )
    return click.option("--chat", default=None, help=CHAT_HELP)(function)


def _target(
    sessions: SessionStore, chat: str | None, global_: bool, create: bool = False
) -> int | None:
    """None for --global; else the chat's id (by number or channel:chat_id)."""
    from core.cli.runtime import chat_param

    if global_ == (chat is not None):
        raise click.UsageError("give exactly one of --chat or --global")
    return None if chat is None else chat_param(sessions, chat, create=create).id


@click.group("memory")
def memory_group() -> None:
    """Structured memories of a chat: list, search, add, forget, forgotten, reindex."""


@memory_group.command("list")
@chat_option
@click.option("--archived", is_flag=True, help="Include archived memories.")
def list_command(chat: str | None, global_: bool, archived: bool) -> None:
    """List a chat's memories (with the global ones)."""
    with open_keeper(load_model=False) as (keeper, sessions):
        chat_id = _target(sessions, chat, global_)
        memories = keeper.store.list(chat_id, include_archived=archived)
        for memory in memories:
            flags = " (global)" if memory.chat_id is None else ""
            flags += " (archived)" if memory.archived else ""
            click.echo(f"#{memory.id} {memory.line()}{flags}  conf={memory.confidence:.2f}")
        click.echo(f"{len(memories)} memor{'y' if len(memories) == 1 else 'ies'}", err=True)


@memory_group.command("search")
@chat_option
@click.argument("query")
@click.option("-k", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--retriever",
    type=click.Choice(["hybrid", "knn", "bm25", "jaccard"]),
    default=None,
    help="Default: [memory] retriever.",
)
def search_command(
    chat: str | None, global_: bool, query: str, k: int, retriever: str | None
) -> None:
    """Rank a chat's memories for QUERY, as a request would."""
    from memory.retrieval import rank_memories

    with open_keeper(load_model=retriever in (None, "hybrid", "knn")) as (keeper, sessions):
        chat_id = _target(sessions, chat, global_)
        mode = retriever or keeper.config.memory.retriever
        for item in rank_memories(keeper.store, chat_id, query, k, mode=mode):
            click.echo(f"{item.score:.4f}  #{item.memory.id} {item.memory.line()}")


@memory_group.command("add")
@chat_option
@click.argument("content")
@click.option(
    "--category",
    type=click.Choice(["PROFILE", "KNOWLEDGE", "EVENT"], case_sensitive=False),
    default="KNOWLEDGE",
    show_default=True,
)
@click.option("--confidence", type=click.FloatRange(0, 1), default=0.9, show_default=True)
@click.option("--expires", default=None, help="ISO 8601 date or time after which it is ignored.")
def add_command(
    chat: str | None,
    global_: bool,
    content: str,
    category: str,
    confidence: float,
    expires: str | None,
) -> None:
    """Add a memory to a chat (or a global one); the quality gate applies, as in chats."""
    from core.errors import InputError
    from memory.keeper import FactRefused, gated
    from memory.store import clean_content, clean_expiry

    try:  # check the input before the (slow) model load
        clean_content(content)
        clean_expiry(expires)
        content = gated(content)
    except FactRefused as exc:
        raise click.ClickException(str(exc)) from exc
    except InputError as exc:
        raise click.BadParameter(str(exc)) from exc
    with open_keeper() as (keeper, sessions):
        chat_id = _target(sessions, chat, global_, create=True)
        try:
            memory_id = keeper.store.add(
                chat_id, content, category, source="cli", confidence=confidence, expires_at=expires
            )
        except InputError as exc:
            raise click.BadParameter(str(exc)) from exc
        click.echo(f"added memory #{memory_id}")


@memory_group.command("forget")
@chat_option
@click.argument("memory_id", type=click.IntRange(1, 2**63 - 1))
def forget_command(chat: str | None, global_: bool, memory_id: int) -> None:
    """Forget memory MEMORY_ID of the chat (or a global one), leaving a tombstone so the
    reflector does not learn it again (see `mnemo memory forgotten`)."""
    with open_keeper(load_model=False) as (keeper, sessions):
        chat_id = _target(sessions, chat, global_)
        memory = keeper.store.get(memory_id)
        if memory is None or memory.chat_id != chat_id:
            raise click.ClickException(f"no memory #{memory_id} in that scope")
        keeper.store.forget(memory_id, forgotten_by="the operator (mnemo memory forget)",
                            speaker=memory.sender_name)  # fmt: skip
        click.echo(f"forgot #{memory_id} {memory.content}")


@memory_group.command("forgotten")
@chat_option
@click.option("--lift", "lift_ids", type=int, multiple=True, help="Drop this tombstone (by id).")
def forgotten_command(chat: str | None, global_: bool, lift_ids: tuple[int, ...]) -> None:
    """List the tombstones of forgotten memories (the reflector does not learn them
    again), or drop some with --lift."""
    with open_keeper(load_model=False) as (keeper, sessions):
        chat_id = _target(sessions, chat, global_)
        tombstones = keeper.store.tombstones(chat_id)
        if lift_ids:
            known = {t.id for t in tombstones}
            missing = sorted(set(lift_ids) - known)
            if missing:
                raise click.ClickException(f"no tombstone {missing} in that scope")
            keeper.store.lift_tombstones(list(lift_ids))
            click.echo(f"lifted {len(lift_ids)} tombstones")
            return
        for t in tombstones:
            click.echo(f"{t.id}  {t.forgotten_at[:16]}  #{t.memory_id} {t.content}  "
                       f"(forgotten by {t.forgotten_by})")  # fmt: skip
        click.echo(f"{len(tombstones)} tombstones", err=True)


@memory_group.command("prepare")
def prepare_command() -> None:
    """Export the embedding model to ONNX now (else the first start does it, once)."""
    from core.cli.runtime import current_config
    from memory.embeddings import load_embedder

    memory = current_config().memory
    embedder = load_embedder(memory.embedding_model, memory.query_precision)
    if embedder is None:
        raise click.ClickException("the embedding model could not be loaded (see above)")
    precision = getattr(embedder, "query_precision", "float32")
    click.echo(f"embedding model ready: {embedder.model_name} ({embedder.dim} dims, "
               f"{precision} queries, {type(embedder).__name__})")  # fmt: skip


@memory_group.command("reindex")
def reindex_command() -> None:
    """Rebuild the keyword and vector indexes from the memories table."""
    with open_keeper() as (keeper, _):
        store = keeper.store
        if not store.vectors_enabled:
            click.echo(
                "vectors unavailable (see `mnemo doctor`); rebuilding keywords only", err=True
            )
        total = store.count_active() if store.vectors_enabled else 0
        with click.progressbar(length=max(total, 1), label="embedding", file=None) as bar:
            done = store.reindex(progress=bar.update)
        click.echo(f"reindexed: {done} memories embedded, keyword index rebuilt")
        click.echo(f"recall index rebuilt: {_rebuild_recall(keeper)} messages")


def _rebuild_recall(keeper: MemoryKeeper) -> int:
    """Index every stored message again, with the keeper's model (`memory.recall`)."""
    import asyncio

    from core.cli.runtime import current_config
    from core.storage.engine import open_storage
    from memory.stores import recaller

    config = current_config()
    storage = open_storage(config.storage)
    try:
        return asyncio.run(recaller(storage, config, keeper).rebuild())
    finally:
        storage.close()

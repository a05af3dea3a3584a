"""`mnemo memory list|search|add|forget|reindex` and `mnemo bench locomo|memory`.

Imports are light at module level (click only) so `mnemo --help` stays fast; the model
and the database are opened inside the commands. The root group's context object gives
the loaded config (anything with a `.config`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

import click

if TYPE_CHECKING:
    from core.config import Config
    from memory.service import MemoryService

CHAT_HELP = "The chat: channel:chat_id (e.g. terminal:local, telegram:-100123) or its number."


class ConfigSource(Protocol):
    @property
    def config(self) -> Config: ...


def _config() -> Config:
    source: ConfigSource = click.get_current_context().find_root().obj
    return source.config


@contextmanager
def open_service(load_model: bool = True) -> Iterator[MemoryService]:
    from core.db import connect
    from memory.service import MemoryService

    config = _config()
    config.storage.data_dir.mkdir(parents=True, exist_ok=True)
    conn = connect(config.storage.database_path)
    try:
        service = MemoryService(config, conn, None if load_model else (lambda: None))
        yield service
    finally:
        conn.close()


def resolve_chat(service: MemoryService, chat: str | None, create: bool = False) -> int | None:
    """None for --global; else the chat's id (by number or channel:chat_id).

    With `create`, a `channel:chat_id` not seen yet is registered (memories for a chat
    before its first message).
    """
    from core.store import SessionStore

    if chat is None:
        return None
    store = SessionStore(service.conn)
    if chat.isdigit() and store.chat_by_id(int(chat)) is not None:
        return int(chat)
    channel, sep, external = chat.partition(":")
    if create and sep and channel and external:
        return store.get_or_create_chat(channel, external).id
    found = store.find_chat(channel, external) if sep else None
    if found is None:
        raise click.BadParameter(f"no chat {chat!r}", param_hint="--chat")
    return found.id


def chat_option(function: click.decorators.FC) -> click.decorators.FC:
    function = click.option("--global", "global_", is_flag=True, help="Global memories (no chat).")(
        function
    )
    return click.option("--chat", default=None, help=CHAT_HELP)(function)


def _target(
    service: MemoryService, chat: str | None, global_: bool, create: bool = False
) -> int | None:
    if global_ == (chat is not None):
        raise click.UsageError("give exactly one of --chat or --global")
    return None if global_ else resolve_chat(service, chat, create)


@click.group("memory")
def memory_group() -> None:
    """Structured memories of a chat: list, search, add, forget, reindex."""


@memory_group.command("list")
@chat_option
@click.option("--archived", is_flag=True, help="Include archived memories.")
def list_command(chat: str | None, global_: bool, archived: bool) -> None:
    """List a chat's memories (with the global ones)."""
    with open_service(load_model=False) as service:
        chat_id = _target(service, chat, global_)
        memories = service.store.list(chat_id, include_archived=archived)
        for memory in memories:
            flags = " (global)" if memory.chat_id is None else ""
            flags += " (archived)" if memory.archived else ""
            click.echo(f"#{memory.id} {memory.line()}{flags}  conf={memory.confidence:.2f}")
        click.echo(f"{len(memories)} memories", err=True)


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
    from memory.rank import rank_memories

    with open_service() as service:
        chat_id = _target(service, chat, global_)
        mode = retriever or service.config.memory.retriever
        for item in rank_memories(
            service.conn,
            chat_id,
            query,
            k,
            mode=mode,
            embedder=service.embedder if mode in ("knn", "hybrid") else None,
        ):
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
    """Add a memory to a chat (or a global one)."""
    from memory.store import MemoryInputError, clean_content, clean_expiry

    try:  # check the input before the (slow) model load
        clean_content(content)
        clean_expiry(expires)
    except MemoryInputError as exc:
        raise click.BadParameter(str(exc)) from exc
    with open_service() as service:
        chat_id = _target(service, chat, global_, create=True)
        try:
            memory_id = service.store.add(
                chat_id, content, category, source="cli", confidence=confidence, expires_at=expires
            )
        except MemoryInputError as exc:
            raise click.BadParameter(str(exc)) from exc
        click.echo(f"added memory #{memory_id}")


@memory_group.command("forget")
@chat_option
@click.argument("memory_id", type=int)
def forget_command(chat: str | None, global_: bool, memory_id: int) -> None:
    """Delete memory MEMORY_ID of the chat (or a global one)."""
    with open_service(load_model=False) as service:
        chat_id = _target(service, chat, global_)
        memory = service.store.get(memory_id)
        if memory is None or memory.chat_id != chat_id:
            raise click.ClickException(f"no memory #{memory_id} in that scope")
        service.store.delete(memory_id)
        click.echo(f"forgot #{memory_id} {memory.content}")


@memory_group.command("reindex")
def reindex_command() -> None:
    """Rebuild the keyword and vector indexes from the memories table."""
    with open_service() as service:
        if service.embedder is None or not service.conn.info.vec_loaded:
            click.echo(
                "vectors unavailable (see `mnemo doctor`); rebuilding keywords only", err=True
            )
        vectors = service.embedder is not None and service.conn.info.vec_loaded
        total = (
            service.conn.execute("SELECT count(*) FROM memories WHERE archived = 0").fetchone()[0]
            if vectors
            else 0
        )
        with click.progressbar(length=max(total, 1), label="embedding", file=None) as bar:
            done = service.store.reindex(progress=bar.update)
        click.echo(f"reindexed: {done} memories embedded, keyword index rebuilt")


def register(cli: click.Group, bench: click.Group) -> None:
    """Add memory's commands to the root `mnemo` group and its `bench` group."""
    from memory.bench_commands import bench_locomo, bench_memory

    cli.add_command(memory_group)
    bench.add_command(bench_locomo)
    bench.add_command(bench_memory)

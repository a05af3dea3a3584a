"""Compaction: split the session safely, flush memory, summarise, archive, mark; delete nothing.

`compact_session()` keeps the most recent messages verbatim (starting at a user message,
so a tool call is never separated from its result), summarises the older part into the
session summary (incrementally), archives it as Markdown under the chat's data dir and
marks its messages with the compaction id. If summarising fails the previous summary is
kept and only the recent messages are sent from then on (logged, status `fallback`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from core.chat_files import ARCHIVE_DIR, chat_dir
from core.db import Connection, transaction
from core.store import Chat, StoredMessage
from core.summary import SummaryOutcome, summarise
from core.tokens import TokenEstimator, effective_window, estimator_for

if TYPE_CHECKING:
    from core.turn import Agent, TurnContext

logger = logging.getLogger(__name__)

Trigger = Literal["threshold", "overflow", "command"]


@dataclass(frozen=True)
class CompactionResult:
    id: int
    trigger: Trigger
    status: Literal["summarised", "fallback"]
    messages_compacted: int
    tokens_before: int
    tokens_after: int
    summary: str | None
    archive_path: str
    error: str = ""


def split_for_compaction(
    history: Sequence[StoredMessage],
    keep_tokens: int,
    keep_recent: int,
    estimator: TokenEstimator,
) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """(old, recent): recent fits `keep_tokens` or has `keep_recent` messages, whichever is
    more, and starts at a user message (moved earlier, else later), so tool calls and their
    results stay together. Nothing is old while the whole history fits `keep_tokens`."""
    count = len(history)
    start, used = count, 0
    for index in range(count - 1, -1, -1):
        used += estimator.message(history[index].to_openai())
        if used > keep_tokens:
            break
        start = index
    if start == 0:
        return [], list(history)  # all of it fits in the reserve
    start = min(start, max(0, count - keep_recent))
    users = [index for index in range(count) if history[index].role == "user"]
    earlier = [index for index in users if 0 < index <= start]
    later = [index for index in users if index > start]
    if earlier:
        start = earlier[-1]
    elif later:
        start = later[0]
    else:
        return [], list(history)
    return list(history[:start]), list(history[start:])


def orphaned_tool_messages(messages: Sequence[dict[str, object]]) -> list[str]:
    """Tool call ids in `messages` whose call or result is missing (should be empty)."""
    called: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:  # type: ignore[attr-defined]
            called.add(str(call.get("id")))
        if message.get("role") == "tool":
            answered.add(str(message.get("tool_call_id")))
    return sorted(called ^ answered)


def session_tokens(
    summary: str | None, history: Sequence[StoredMessage], est: TokenEstimator
) -> int:
    tokens = est.text(summary or "")
    return tokens + sum(est.message(message.to_openai()) for message in history)


def archive_markdown(chat: Chat, old: Sequence[StoredMessage], trigger: str, status: str) -> str:
    lines = [
        f"# Compacted messages of {chat.key}",
        "",
        f"Messages #{old[0].id}-#{old[-1].id} ({len(old)}), trigger {trigger}, status {status},"
        f" archived {datetime.now(UTC).isoformat(timespec='seconds')}.",
    ]
    for message in old:
        who = f" · {message.sender}" if message.sender else ""
        lines += ["", f"### #{message.id} · {message.role}{who} · {message.created_at}", ""]
        if message.tool_call_id:
            lines.append(f"(result of tool call `{message.tool_call_id}`)")
        if message.content:
            lines.append(message.content)
        for call in message.tool_calls or []:
            function = call.get("function", {})
            lines.append(
                f"- tool call `{call.get('id')}`: `{function.get('name')}`"
                f"({function.get('arguments', '')})"
            )
    return "\n".join(lines) + "\n"


def write_archive(agent: Agent, chat: Chat, old: Sequence[StoredMessage], text: str) -> Path:
    directory = chat_dir(agent.config, chat) / ARCHIVE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    path = directory / f"{stamp}-messages-{old[0].id}-{old[-1].id}.md"
    path.write_text(text, encoding="utf-8")
    return path


async def flush_memory(agent: Agent, turn: TurnContext) -> None:
    """Let every extension save what it needs (facts) before detail is summarised."""
    for extension in agent.extensions:
        try:
            await extension.before_compaction(turn)
        except Exception:
            logger.exception("before_compaction of %s failed; compacting anyway", extension.name)


async def compact_session(
    agent: Agent, turn: TurnContext, trigger: Trigger
) -> CompactionResult | None:
    """Compact the chat's session now; None when there is nothing old enough to compact."""
    config, store, chat = agent.config, agent.store, turn.chat
    estimator = estimator_for(store.conn, config, agent.llm.model)
    history = store.history(chat.id)
    keep_tokens = int(effective_window(config.llm) * config.context.reserve_ratio)
    old, recent = split_for_compaction(history, keep_tokens, config.context.keep_recent, estimator)
    if not old:
        logger.info("nothing to compact in %s (%d messages)", chat.key, len(history))
        return None
    previous = store.session(chat.id).summary
    before = session_tokens(previous, history, estimator)
    await flush_memory(agent, turn)
    outcome = await summarise(agent.llm, store, config, chat.id, previous, old, estimator)
    status: Literal["summarised", "fallback"] = "summarised" if outcome.summary else "fallback"
    if outcome.summary is None:
        logger.warning(
            "compaction of %s: no usable summary (%s); keeping only the recent messages",
            chat.key,
            outcome.error,
        )
    archive = write_archive(agent, chat, old, archive_markdown(chat, old, trigger, status))
    summary = outcome.summary or previous
    after = session_tokens(summary, recent, estimator)
    result = CompactionResult(
        0, trigger, status, len(old), before, after, summary, str(archive), outcome.error
    )
    result = replace(result, id=_record(agent.store.conn, chat, old, result, outcome))
    logger.info("compacted %d messages of %s (%s, %s): %d -> %d tokens",
                len(old), chat.key, trigger, status, before, after)  # fmt: skip
    return result


def _record(
    conn: Connection,
    chat: Chat,
    old: Sequence[StoredMessage],
    result: CompactionResult,
    outcome: SummaryOutcome,
) -> int:
    """Store the compaction, mark its messages and move the session start, in one transaction."""
    first, last = old[0].id, old[-1].id
    with transaction(conn):
        cursor = conn.execute(
            "INSERT INTO compactions (chat_id, trigger, status, first_message_id,"
            " last_message_id, messages_compacted, tokens_before, tokens_after, summary_calls,"
            " archive_path, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (chat.id, result.trigger, result.status, first, last, len(old),
             result.tokens_before, result.tokens_after, outcome.calls, result.archive_path,
             outcome.error[:500]),
        )  # fmt: skip
        compaction_id = int(cursor.lastrowid)
        conn.execute(
            "UPDATE messages SET compaction_id = ? WHERE chat_id = ? AND id BETWEEN ? AND ?"
            " AND compaction_id IS NULL",
            (compaction_id, chat.id, first, last),
        )
        conn.execute(
            "UPDATE sessions SET summary = coalesce(?, summary),"
            " compaction_count = compaction_count + 1, started_at_message_id = ?,"
            " updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE chat_id = ?",
            (outcome.summary, last, chat.id),
        )
    return compaction_id

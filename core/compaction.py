"""Compaction: split the session safely, flush memory, summarise, archive, mark; delete nothing.

`Compactor.compact()` keeps the most recent messages verbatim (starting at a user message,
so a tool call is never separated from its result), summarises the older part into the
session summary (incrementally), archives it as Markdown under the chat's data dir and
marks its messages with the compaction id. If summarising fails the previous summary is
kept and only the recent messages are sent from then on (logged, status `fallback`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.api import Chat, TurnContext
from core.calibration import estimator_for
from core.chat_files import ARCHIVE_DIR, chat_dir
from core.clock import utc_now
from core.config import Config
from core.llm import LLM
from core.store import CompactionRecord, SessionStore, StoredMessage
from core.summary import summarise
from core.tokens import TokenEstimator, effective_window

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
        f" archived {utc_now().isoformat(timespec='seconds')}.",
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


def write_archive(config: Config, chat: Chat, old: Sequence[StoredMessage], text: str) -> Path:
    directory = chat_dir(config, chat) / ARCHIVE_DIR
    directory.mkdir(parents=True, exist_ok=True)
    stamp = utc_now().strftime("%Y%m%dT%H%M%S")
    path = directory / f"{stamp}-messages-{old[0].id}-{old[-1].id}.md"
    path.write_text(text, encoding="utf-8")
    return path


async def _nothing_to_flush(turn: TurnContext) -> None:
    return None


@dataclass
class Compactor:
    """Compacts a chat's session: built with its store, model client and config.

    `before` runs first (the extensions' `before_compaction`: the reflector saves facts).
    """

    config: Config
    store: SessionStore
    llm: LLM
    before: Callable[[TurnContext], Awaitable[None]] = _nothing_to_flush

    async def compact(self, turn: TurnContext, trigger: Trigger) -> CompactionResult | None:
        """Compact the chat's session now; None when nothing is old enough to compact."""
        config, store, chat = self.config, self.store, turn.chat
        estimator = estimator_for(store, config, self.llm.model)
        history = store.history(chat.id)
        keep_tokens = int(effective_window(config.llm) * config.context.reserve_ratio)
        old, recent = split_for_compaction(
            history, keep_tokens, config.context.keep_recent, estimator
        )
        if not old:
            logger.info("nothing to compact in %s (%d messages)", chat.key, len(history))
            return None
        previous = store.session(chat.id).summary
        before = session_tokens(previous, history, estimator)
        await self.before(turn)
        outcome = await summarise(self.llm, store, config, chat.id, previous, old, estimator)
        status: Literal["summarised", "fallback"] = "summarised" if outcome.summary else "fallback"
        if outcome.summary is None:
            logger.warning(
                "compaction of %s: no usable summary (%s); keeping only the recent messages",
                chat.key,
                outcome.error,
            )
        archive = write_archive(config, chat, old, archive_markdown(chat, old, trigger, status))
        summary = outcome.summary or previous
        after = session_tokens(summary, recent, estimator)
        record = CompactionRecord(
            trigger, status, old[0].id, old[-1].id, len(old), before, after, outcome.calls,
            str(archive), outcome.summary, outcome.error,
        )  # fmt: skip
        compaction_id = store.record_compaction(chat.id, record)
        logger.info("compacted %d messages of %s (%s, %s): %d -> %d tokens",
                    len(old), chat.key, trigger, status, before, after)  # fmt: skip
        return CompactionResult(
            compaction_id, trigger, status, len(old), before, after, summary, str(archive),
            outcome.error,
        )  # fmt: skip

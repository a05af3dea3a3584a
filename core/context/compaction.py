"""Compaction: split the session safely, summarise, flush memory, archive, mark; delete nothing.

`Compactor.compact()` keeps the most recent messages verbatim (starting at a user message,
so a tool call is never separated from its result), no more than leaves the request at
half the trigger (hysteresis: the next compaction is many turns away, not one), summarises
the older part into the session summary (incrementally; asked as the continuation of the
start of the chat's own request that holds the older part, when it fits, so a caching
server evaluates only the instruction),
lets the extensions save what they learn from it (`before`), archives it as Markdown
among the chat's files (`core.storage.file_store`) and marks its messages with the compaction id.
If summarising fails the previous summary is kept and only the recent messages are sent
from then on (logged, status `fallback`).

The flush must succeed, or the compaction waits: when an extension has not saved what it
needs from the old part (the reflector failed on it), a threshold compaction is held back
while the request still fits the window, at most `MAX_HOLDS` times in a row per chat (the
next try flushes before summarising, so a failing flush costs no summary). An overflow, a
`/compact` or the last allowed try goes ahead with a logged warning.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from core.api import Chat, TurnContext
from core.chat.files import ARCHIVE_DIR, chat_prefix
from core.clock import utc_now
from core.config import Config
from core.context.request import with_context
from core.context.summary import SummaryBudget, summarise
from core.model.calibration import estimator_for
from core.model.client import LLM
from core.model.profile import effective_window, window_for
from core.model.tokens import TokenEstimator
from core.storage.file_store import FileStore
from core.storage.store import CompactionRecord, SessionStore, StoredMessage

logger = logging.getLogger(__name__)

Trigger = Literal["threshold", "overflow", "command"]
AFTER_COMPACTION_SHARE = 0.5  # of the trigger: where a compaction leaves the request
SUMMARY_GUESS_MAX = 1_000  # tokens
MAX_HOLDS = 3  # threshold compactions held back in a row for a flush that failed


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


def stored_tokens(message: StoredMessage, estimator: TokenEstimator) -> int:
    """Estimated tokens of a stored message as requests send it: with the context block
    kept on it (`core.context.request`), which can be larger than the message itself."""
    sent = with_context(message.to_openai(), message.context or "", late_system=True)
    return sum(estimator.message(entry) for entry in sent)


def suffix_tokens(history: Sequence[StoredMessage], estimator: TokenEstimator) -> list[int]:
    """`result[i]`: estimated tokens of `history[i:]` (one more entry, 0, at the end)."""
    totals = [0] * (len(history) + 1)
    for index in range(len(history) - 1, -1, -1):
        totals[index] = totals[index + 1] + stored_tokens(history[index], estimator)
    return totals


def split_for_compaction(
    history: Sequence[StoredMessage],
    keep_tokens: int,
    keep_recent: int,
    estimator: TokenEstimator,
    max_keep_tokens: int | None = None,
) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """(old, recent). Recent starts at a user message, so a tool call stays with its result,
    and holds what fits `keep_tokens` or the `keep_recent` newest messages, whichever is
    more (moved earlier to a user message, else later), but no more than `max_keep_tokens`
    when that is given, and at least the newest user turn. Nothing is old while the whole
    history fits `keep_tokens`."""
    count = len(history)
    suffix = suffix_tokens(history, estimator)
    boundaries = [index for index in range(1, count) if history[index].role == "user"]
    if suffix[0] <= keep_tokens or not boundaries:
        return [], list(history)
    fitting = next(index for index in range(count + 1) if suffix[index] <= keep_tokens)
    wanted = min(fitting, max(0, count - keep_recent))
    earlier = [index for index in boundaries if index <= wanted]
    start = earlier[-1] if earlier else next(i for i in boundaries if i > wanted)
    if max_keep_tokens is not None and suffix[start] > max_keep_tokens:
        fits = [index for index in boundaries if index > start and suffix[index] <= max_keep_tokens]
        start = fits[0] if fits else boundaries[-1]
    return list(history[:start]), list(history[start:])


def history_room(config: Config, usable: int, overhead: int, summary_tokens: int) -> int:
    """Tokens of history a compaction may keep: what leaves the request (prefix, tools,
    dynamic context, summary) at `AFTER_COMPACTION_SHARE` of the trigger, so the next
    compaction is many turns away."""
    target = int(usable * config.context.compaction_threshold * AFTER_COMPACTION_SHARE)
    return max(0, target - overhead - summary_tokens)


def summary_guess(previous: str | None, usable: int, estimator: TokenEstimator) -> int:
    """Tokens the new summary will take, guessed before it is written."""
    return max(estimator.text(previous or ""), min(usable // 10, SUMMARY_GUESS_MAX))


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
    return tokens + sum(stored_tokens(message, est) for message in history)


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


def write_archive(files: FileStore, chat: Chat, old: Sequence[StoredMessage], text: str) -> str:
    """Store the archive among the chat's files; its path as the `FileStore` names it."""
    stamp = utc_now().strftime("%Y%m%dT%H%M%S")
    path = f"{chat_prefix(chat)}/{ARCHIVE_DIR}/{stamp}-messages-{old[0].id}-{old[-1].id}.md"
    files.write_text(path, text)
    return path


async def _nothing_to_flush(turn: TurnContext, up_to: int) -> bool:
    return True


@dataclass
class Compactor:
    """Compacts a chat's session: built with its store, model client and config.

    `before(turn, up_to)` runs before the old part is marked (the extensions'
    `before_compaction`: the reflector saves facts from the messages up to `up_to`); False
    holds a threshold compaction back (see the module docstring). `held` counts, per chat,
    the compactions held back in a row.
    `overhead` is the last known size of a request outside its summary and history
    (prefix, tools, dynamic context); `/compact` plans with it.
    """

    config: Config
    store: SessionStore
    llm: LLM
    files: FileStore
    before: Callable[[TurnContext, int], Awaitable[bool]] = _nothing_to_flush
    overhead: int = 0
    held: dict[int, int] = field(default_factory=dict)

    async def compact(
        self,
        turn: TurnContext,
        trigger: Trigger,
        overhead: int | None = None,
        conversation: Sequence[dict[str, Any]] = (),
    ) -> CompactionResult | None:
        """Compact the chat's session now, keeping only as much recent history as leaves
        the request well under the trigger; None when nothing is old enough to compact.

        `conversation` is the chat's request as just planned: the summary is asked for as
        its continuation, so a caching server evaluates only the instruction."""
        config, store, chat = self.config, self.store, turn.chat
        self.overhead = self.overhead if overhead is None else overhead
        estimator = estimator_for(store, config, self.llm.model)
        history = store.history(chat.id)
        window = window_for(store, config.llm, self.llm.model).tokens
        usable = effective_window(window, config.llm.max_output_tokens)
        previous = store.session(chat.id).summary
        room = history_room(
            config, usable, self.overhead, summary_guess(previous, usable, estimator)
        )
        keep_tokens = int(usable * config.context.reserve_ratio)
        old, recent = split_for_compaction(
            history, keep_tokens, config.context.keep_recent, estimator, room
        )
        if not old:
            logger.info("nothing to compact in %s (%d messages)", chat.key, len(history))
            return None
        return await self._compact(
            turn, trigger, previous, (old, recent), estimator, window, conversation
        )

    async def _compact(
        self,
        turn: TurnContext,
        trigger: Trigger,
        previous: str | None,
        split: tuple[list[StoredMessage], list[StoredMessage]],
        estimator: TokenEstimator,
        window: int,
        conversation: Sequence[dict[str, Any]],
    ) -> CompactionResult | None:
        """Flush memory, summarise the old part of `split`, archive and mark it; None when
        the flush failed and the compaction is held back."""
        config, store, chat = self.config, self.store, turn.chat
        old, recent = split
        before = session_tokens(previous, old + recent, estimator)
        room = self.overhead + before <= effective_window(window, config.llm.max_output_tokens)
        # The last flush failed: flush first, so failing again costs no summary.
        flush_first = chat.id in self.held
        if flush_first and not await self._flushed(turn, trigger, old[-1].id, room):
            return None
        budget = SummaryBudget.of(window, config)
        first_kept = recent[0] if recent else None
        outcome = await summarise(
            self.llm, store, chat.id, previous, old, estimator, budget, conversation, first_kept
        )
        # After the summary, whose request continues the chat's cached prompt: a reflector
        # call first would evict it from a single-slot server's cache.
        if not flush_first and not await self._flushed(turn, trigger, old[-1].id, room):
            return None
        status: Literal["summarised", "fallback"] = "summarised" if outcome.summary else "fallback"
        if outcome.summary is None:
            logger.warning(
                "compaction of %s: no usable summary (%s); keeping only the recent messages",
                chat.key,
                outcome.error,
            )
        archive = write_archive(self.files, chat, old, archive_markdown(chat, old, trigger, status))
        summary = outcome.summary or previous
        after = session_tokens(summary, recent, estimator)
        record = CompactionRecord(
            trigger, status, old[0].id, old[-1].id, len(old), before, after, outcome.calls,
            archive, outcome.summary, outcome.error,
        )  # fmt: skip
        compaction_id = store.record_compaction(chat.id, record)
        logger.info("compacted %d messages of %s (%s, %s): %d -> %d tokens",
                    len(old), chat.key, trigger, status, before, after)  # fmt: skip
        return CompactionResult(
            compaction_id, trigger, status, len(old), before, after, summary, archive,
            outcome.error,
        )  # fmt: skip

    async def _flushed(self, turn: TurnContext, trigger: Trigger, up_to: int, room: bool) -> bool:
        """Whether the compaction may go on: the extensions saved what they need from the
        messages up to `up_to`, or it cannot wait (overflow, `/compact`, no room left, or
        `MAX_HOLDS` tries held back already)."""
        chat = turn.chat
        if await self.before(turn, up_to):
            self.held.pop(chat.id, None)
            return True
        holds = self.held.get(chat.id, 0)
        if trigger == "threshold" and room and holds < MAX_HOLDS:
            self.held[chat.id] = holds + 1
            logger.warning(
                "compaction of %s held back (%d of %d): memory has not saved messages up to"
                " #%d yet; trying again next turn",
                chat.key, holds + 1, MAX_HOLDS, up_to,
            )  # fmt: skip
            return False
        self.held.pop(chat.id, None)
        why = "no room left" if trigger == "threshold" and not room else f"trigger {trigger}"
        if trigger == "threshold" and room:
            why = f"held back {holds} times already"
        logger.warning(
            "compaction of %s goes ahead (%s) though memory has not saved messages up to #%d:"
            " facts only they state may be lost (the archive keeps them)",
            chat.key, why, up_to,
        )  # fmt: skip
        return True

"""A turn as it happens, for the dashboard of any process: the request being sent, the
reply as it grows, the tool calls as they run, then the finished turn (`live_turns`).

`LiveTurn` writes one chat's row as its turn goes; it is bounded (one row per chat,
overwritten; the text and the tool calls capped) and throttled (the growing text is
written at most every `WRITE_EVERY_S`). Writing is best effort: a failure is logged once
and the turn goes on unrecorded. `live_view` reads a row and says whether a `running`
turn still runs (its process alive and holding the chat) or stopped (a crash, a kill).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core.model.completion import ToolCall
from core.storage.live_turn_store import DatabaseLiveTurnStore, LiveTurnKey, LiveTurnRow
from core.storage.store import DeliveryStore
from core.turn.lease import new_owner_id, owner_is_gone

logger = logging.getLogger(__name__)

WRITE_EVERY_S = 0.5  # the growing text reaches the database at most this often
REPLY_CHARS = 16_000  # the live text kept (its tail, as the reply grows)
TOOL_CALLS_KEPT = 20  # the turn's last tool calls
ARGUMENT_CHARS = 500
RESULT_CHARS = 500
MESSAGES_SHOWN = 6  # the request's last messages, summarised
MESSAGE_CHARS = 600
# A running row not written for this long, by a process not holding the chat's turn
# lease, is a turn that stopped (its process was killed or lost the database).
STALE_S = 600.0
PROCESS_OWNER = new_owner_id()  # for turns taken without a lease (tests, benchmarks)

TextSink = Callable[[str], Awaitable[None]]


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def message_summary(message: dict[str, Any]) -> dict[str, str]:
    """A request message as the inspector shows it: its role and its text (clipped), with
    each image part as "[image]" and each tool call as `name(arguments)`."""
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get("text", "") if p.get("type") == "text" else "[image]" for p in content]
        text = "\n".join(str(t) for t in texts)
    else:
        text = str(content or "")
    calls = [c.get("function", {}) for c in message.get("tool_calls") or []]
    text += "".join(f"\n→ {c.get('name')}({c.get('arguments', '')})" for c in calls)
    return {"role": str(message.get("role", "")), "text": clip(text, MESSAGE_CHARS)}


def request_summary(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, figures: dict[str, int]
) -> dict[str, Any]:
    """What the inspector shows of a request: its size, the tools offered, its images and
    its last messages."""
    images = sum(
        1
        for message in messages
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    )
    names = [str(t.get("function", {}).get("name", "")) for t in tools or []]
    return {
        **figures,
        "messages": len(messages),
        "images": images,
        "tools": names,
        "last": [message_summary(m) for m in messages[-MESSAGES_SHOWN:]],
    }


class LiveTurn:
    """One turn's live row. Nothing is written until the turn reaches the model (`request`)."""

    def __init__(
        self, store: DatabaseLiveTurnStore, key: LiveTurnKey, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.key = key
        self.clock = clock
        self.started = False
        self._broken = False
        self._written_at = 0.0
        self._pending: str | None = None
        self._tools: list[dict[str, Any]] = []

    def request(self, summary: dict[str, Any]) -> None:
        """A model call is being sent (the first one starts the row)."""
        if not self.started:
            self.started = self._write(lambda now: self.store.begin(self.key, now))
        self._pending = None
        self._write(lambda now: self.store.set_request(self.key, summary, now))

    async def text(self, text: str) -> None:
        """The reply so far (a `TextSink`): written when the last write is old enough."""
        self._pending = text[-REPLY_CHARS:]
        if self.clock() - self._written_at >= WRITE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and self.started:
            self._write(lambda now: self.store.set_reply(self.key, pending, now))

    def tool_calls(self, calls: list[ToolCall]) -> None:
        """The model asked for `calls`: shown as running until `tool_results`."""
        self.flush()
        for call in calls:
            arguments = clip(call.arguments, ARGUMENT_CHARS)
            self._tools.append({"id": call.id, "name": call.name, "arguments": arguments,
                                "result": None})  # fmt: skip
        self._save_tools()

    def tool_results(self, messages: list[dict[str, Any]]) -> None:
        """The round's results (its `role: tool` messages) on their calls."""
        results = {m.get("tool_call_id"): str(m.get("content", "")) for m in messages
                   if m.get("role") == "tool"}  # fmt: skip
        for entry in self._tools:
            if entry["result"] is None and entry["id"] in results:
                entry["result"] = clip(results[entry["id"]], RESULT_CHARS)
        self._save_tools()

    def finish(self, state: str, reply: str) -> None:
        """The turn is over: `done` with the text the user got, or `failed`."""
        if self.started:
            self._pending = None
            self._write(lambda now: self.store.finish(self.key, state, reply[-REPLY_CHARS:], now))

    def _save_tools(self) -> None:
        self._tools = self._tools[-TOOL_CALLS_KEPT:]
        tools = [dict(entry) for entry in self._tools]
        if self.started:
            self._write(lambda now: self.store.set_tools(self.key, tools, now))

    def _write(self, write: Callable[[float], object]) -> bool:
        if self._broken:
            return False
        now = self.clock()
        try:
            write(now)
        except Exception as exc:  # the turn matters more than its live view
            logger.warning("the live view of chat %d stops for this turn: %s",
                           self.key.chat_id, exc)  # fmt: skip
            self._broken = True
            return False
        self._written_at = now
        return True


def tee(first: TextSink | None, second: TextSink) -> TextSink | None:
    """`first` and then `second`, or None without `first` (the turn is not streamed)."""
    if first is None:
        return None

    async def both(text: str) -> None:
        await first(text)
        await second(text)

    return both


@dataclass(frozen=True)
class LiveView:
    """A chat's live row as the dashboard shows it: `state` is `stopped` for a running row
    whose process is gone."""

    row: LiveTurnRow
    state: str  # running, done, failed, stopped

    def to_dict(self) -> dict[str, Any]:
        row = self.row
        return {
            "state": self.state, "inbound_id": row.inbound_id, "rounds": row.rounds,
            "request": row.request, "reply": row.reply, "tools": row.tools,
            "started_at": row.started_at, "finished_at": row.finished_at,
        }  # fmt: skip


def live_view(
    store: DatabaseLiveTurnStore,
    deliveries: DeliveryStore,
    chat_id: int,
    clock: Callable[[], float] = time.time,
) -> LiveView | None:
    """The chat's live (or last) turn; None before its first turn reached the model."""
    row = store.get(chat_id)
    if row is None or row.state != "running":
        return None if row is None else LiveView(row, row.state)
    now = clock()
    holder = deliveries.turn_holder(chat_id)
    if holder is not None and holder.owner == row.owner and holder.expires_at > now:
        return LiveView(row, "running")
    if owner_is_gone(row.owner) or now - row.updated_at > STALE_S:
        return LiveView(row, "stopped")
    return LiveView(row, "running")

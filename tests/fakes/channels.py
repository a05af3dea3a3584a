"""A recording channel for tests and benchmarks: what the dispatcher sent and when it typed.

It implements `core.api.Channel` without a platform: `sent` keeps the replies in the
order they went out, `typing_peak` the most chats shown "typing…" at once, and
`fail_next(n)` makes the next `n` sends raise, as a network outage would.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from core.api import Handler, Outbound


class RecordingChannel:
    """A `Channel` named `name` that records instead of delivering."""

    def __init__(self, name: str = "terminal") -> None:
        self.name = name
        self.sent: list[Outbound] = []
        self.failed: list[Outbound] = []
        self.typing_started: list[str] = []  # chat ids, in order
        self.typing_now = 0
        self.typing_peak = 0
        self._failures = 0

    def fail_next(self, times: int) -> None:
        """The next `times` sends raise `ConnectionError`."""
        self._failures += times

    async def run(self, handler: Handler) -> None:
        await asyncio.Future()  # nothing arrives on its own; tests call the handler

    async def send(self, message: Outbound) -> None:
        if self._failures:
            self._failures -= 1
            self.failed.append(message)
            raise ConnectionError("the recording channel was told to fail this send")
        self.sent.append(message)

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: str) -> AsyncIterator[None]:
        self.typing_started.append(chat_id)
        self.typing_now += 1
        self.typing_peak = max(self.typing_peak, self.typing_now)
        try:
            yield
        finally:
            self.typing_now -= 1

    def texts(self, chat_id: str | None = None) -> list[str]:
        """The texts sent (to one chat), in order."""
        return [m.text for m in self.sent if chat_id is None or m.chat_id == chat_id]


class StreamingRecordingChannel(RecordingChannel):
    """A `RecordingChannel` that also takes partial replies (`StreamingChannel`):
    `partials` keeps each text shown, with the monotonic time it was shown."""

    def __init__(self, name: str = "terminal", streaming: bool = True) -> None:
        super().__init__(name)
        self.streaming = streaming
        self.partials: list[tuple[float, Outbound]] = []

    async def show_partial(self, message: Outbound) -> None:
        self.partials.append((time.monotonic(), message))

    def shown(self) -> list[str]:
        """The partial texts shown, in order."""
        return [message.text for _, message in self.partials]

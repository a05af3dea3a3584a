"""Whether the bot is answering: how many turns run now and when the last one ended, so that
heavy background work (the MCP servers' start: the SDK's import is about a second of CPU)
can wait until the bot is quiet instead of slowing the reply being written."""

from __future__ import annotations

import asyncio
import time

POLL_S = 0.05  # how often `quiet()` looks; a turn takes longer than this to notice


class TurnActivity:
    """Turns begun and ended (`Agent.answer` marks them); `quiet()` waits for a lull."""

    def __init__(self) -> None:
        self.running = 0
        self._quiet_since = time.monotonic()  # when the last turn ended (or this began)

    def begin(self) -> None:
        self.running += 1

    def end(self) -> None:
        self.running = max(0, self.running - 1)
        if not self.running:
            self._quiet_since = time.monotonic()

    def quiet_for(self) -> float:
        """Seconds since the last turn ended (or since this was made); 0 while one runs."""
        return 0.0 if self.running else time.monotonic() - self._quiet_since

    async def quiet(self, for_s: float, at_most_s: float) -> bool:
        """Wait until no turn has run for `for_s` seconds (counted from now at the earliest,
        so a message that arrives just after start is seen), or `at_most_s` have passed on a
        bot that is never quiet. Returns whether the lull came."""
        began = time.monotonic()
        while True:
            now = time.monotonic()
            if not self.running and now - max(began, self._quiet_since) >= for_s:
                return True
            if now - began >= at_most_s:
                return False
            await asyncio.sleep(POLL_S)

"""The terminal channel: a local conversation on stdin/stdout.

Interactive (stdin is a terminal): a prompt per message. Scripted (stdin is a pipe or
file): one message per line, each reply printed on stdout, exit at end of input.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator
from typing import TextIO

from core.api import Handler, Inbound, Outbound

PROMPT = "you> "


class TerminalChannel:
    name = "terminal"

    def __init__(
        self,
        chat_id: str = "local",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        interactive: bool | None = None,
    ) -> None:
        self.chat_id = chat_id
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.interactive = self.stdin.isatty() if interactive is None else interactive

    async def run(self, handler: Handler) -> None:
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        # A daemon thread, not asyncio.to_thread: a blocked readline must not hold up shutdown.
        reader = threading.Thread(target=self._read_lines, args=(loop, lines), daemon=True)
        reader.start()
        while True:
            if self.interactive:
                self._write(PROMPT, newline=False)
            line = await lines.get()
            if line is None:
                return
            text = line.rstrip("\n")
            if not text.strip():
                continue
            inbound = Inbound(self.name, self.chat_id, text, sender_id="local", sender_name="you")
            reply = await handler(inbound)
            if reply is not None:
                await self.send(reply)

    def _read_lines(
        self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]
    ) -> None:
        try:
            for line in self.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(lines.put_nowait, None)

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: str) -> AsyncIterator[None]:
        """No indicator: the terminal waits for each reply anyway."""
        yield

    async def send(self, message: Outbound) -> None:
        prefix = "mnemo> " if self.interactive else ""
        self._write(prefix + message.text)

    def _write(self, text: str, newline: bool = True) -> None:
        self.stdout.write(text + ("\n" if newline else ""))
        self.stdout.flush()
